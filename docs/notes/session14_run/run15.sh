#!/bin/bash
# session 14 call 15: issue 7's full tables again with whole outputs kept (call 14's tail cut their rows): four methods,
# 1-4096 tokens, both shapes, three rounds, PyTorch beside.
set -o pipefail
C=$PWD/.carry/s14c13; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== $m ($SECONDS s)" | tee -a $L
  timeout 280 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 3 \
    --compare-torch 2>&1 | grep -vE "^\s*$" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
