#!/bin/bash
# session 8 call 6: the full 5-round tables of the session's final engine (main at 9515423: early start, AMX down
# kernels rounding into bf16 slot outputs, the chunked merge), both shapes.
set -o pipefail
C=$PWD/.carry/s8c5; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m ($SECONDS s)" | tee -a $L
  timeout 180 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
