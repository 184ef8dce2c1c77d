#!/bin/bash
# Session 20, call 11: issue 7's 4096-token target row four more times with the final build (whole output kept).
set -o pipefail
C=$PWD/.carry/s20e; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for r in 1 2 3 4; do
  echo "== round $r ($SECONDS s)" | tee -a $L
  timeout 120 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 \
    --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
