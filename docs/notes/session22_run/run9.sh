#!/bin/bash
# Session 22, call 9 (main at 101fb9c; no prefill code changed this session): issue 7's 4096-token target row, twice.
set -o pipefail
C=$PWD/.carry/s22g; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for r in 1 2; do
  timeout 200 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
