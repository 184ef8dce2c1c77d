#!/bin/bash
# session 6 call 4 (same binary as call 3): prefill kernel-call size, alternated 4 times in one call, Qwen3-30B at
# 4096 and 512 tokens: bf16 (AMXBF16) 32/64/96/128 tokens, int8 (AMXINT8) 256/512; then both shapes at 4096 tokens
# with bf16 calls of 64 against PyTorch (5 rounds).
set -o pipefail
C=$PWD/.carry/s6c4; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for i in 1 2 3 4; do
  for c in 32 64 96 128; do
    [ $SECONDS -gt 330 ] && break
    echo "== $i bf16 chunk $c ($SECONDS s)" | tee -a $L; timeout 40 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 512,4096 --min-time 300ms --prefill-chunk $c --phases 2>&1 | grep -E "^AMX" | tee -a $L
  done
  for c in 256 512; do
    [ $SECONDS -gt 330 ] && break
    echo "== $i int8 chunk $c ($SECONDS s)" | tee -a $L; timeout 40 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8 --tokens 512,4096 --min-time 300ms --prefill-chunk $c 2>&1 | grep -E "^AMX" | tee -a $L
  done
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do echo "== torch $m chunk 64 ($SECONDS s)" | tee -a $L; [ $SECONDS -lt 500 ] && timeout 95 $D/kt bench --type moe --model $m --methods AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --prefill-chunk 64 --phases 2>&1 | grep -vE "^\s*$|^#" | tee -a $L; done
echo "end $SECONDS s" | tee -a $L
