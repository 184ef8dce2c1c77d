#!/bin/bash
# issue 7's 4096-token targets on Qwen3-30B shapes, repeated: three kt bench calls back to back, each with its own PyTorch baseline.
set -o pipefail
D=/tmp/r; mkdir -p $D; gunzip -c .carry/rep/kt.gz > $D/kt; chmod +x $D/kt
for i in 1 2 3; do
  echo "== rep $i $(date +%T)"
  timeout 100 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 300ms --compare-torch 2>&1 | grep -E '^(AMX|read)' | cut -c1-150
done
