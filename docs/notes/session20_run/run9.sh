#!/bin/bash
# Session 20, call 9: issue 7's table with the session's final build (call 8's binary; bf16 B tiles with the T1
# hint): Qwen3-30B AMXINT8 / AMXBF16 at 4096 tokens twice, then the full table (five methods, 1-4096 tokens, three
# rounds, PyTorch alongside) for both shapes.
set -o pipefail
C=$PWD/.carry/s20e; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for r in 1 2; do
  echo "== qwen3-30b 4096, round $r ($SECONDS s)" | tee -a $L
  timeout 200 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 \
    --compare-torch --phases 2>&1 | grep -vE "^\s*$" | tail -14 | tee -a $L
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== $m full table ($SECONDS s)" | tee -a $L
  timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,INT4_KGROUP,AMXINT8,AMXBF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 3 \
    --compare-torch 2>&1 | grep -vE "^\s*$" | tail -34 | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
