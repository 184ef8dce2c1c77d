#!/bin/bash
# session 14 call 14: issue 7's table on this call's host with the final build (the engine unchanged since session 11):
# Qwen3-30B AMXINT8 / AMXBF16 at 4096 tokens twice, then the full table (four methods, 1-4096 tokens) for both shapes.
set -o pipefail
C=$PWD/.carry/s14c13; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for r in 1 2; do
  echo "== qwen3-30b 4096, round $r ($SECONDS s)" | tee -a $L
  timeout 200 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 \
    --compare-torch --phases 2>&1 | grep -vE "^\s*$" | tail -14 | tee -a $L
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== $m full table ($SECONDS s)" | tee -a $L
  timeout 230 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 3 \
    --compare-torch 2>&1 | grep -vE "^\s*$" | tail -30 | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
