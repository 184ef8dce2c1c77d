#!/bin/bash
# session 13 call 5: issue 7's prefill ratios on this call's host (the engine unchanged since session 11): AMXBF16 and
# AMXINT8 at 4096 tokens on Qwen3-30B shapes beside PyTorch's expert-by-expert bf16 MoE and the AMX tile probe, twice.
set -o pipefail
C=$PWD/.carry/s13c5; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for r in 1 2; do
  echo "== round $r ($SECONDS s)" | tee -a $L
  timeout 280 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 \
    --compare-torch --phases 2>&1 | grep -vE "^\s*$" | tail -14 | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
