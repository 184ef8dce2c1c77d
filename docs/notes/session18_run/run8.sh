#!/bin/bash
# Session 18, call 8 (kt_first): int4 calls of more than 32 tokens with the unpack fused into their first 32-token
# block, into the whole panels the int8 core then runs the other tokens over (--amx-int4-fused-first 1), against the
# whole-panel unpack first (-1), alternated twice, at 1024 and 2048 tokens (Qwen3.5 32/64 tokens per expert,
# Qwen3-30B 64/128).
set -o pipefail
C=$PWD/.carry/s18; D=/tmp/b; mkdir -p $D
xz -dc $C/kt_first.xz > $D/kt_first; chmod +x $D/kt_first
L=$OUT/log.txt
for r in 1 2; do
  for ff in -1 1; do
    timeout 45 $D/kt_first bench --type moe --methods AMXINT4,INT4_KGROUP --tokens 1024,2048 --min-time 200ms --amx-int4-fused-first $ff 2>&1 \
      | grep -E '^(AMX|INT4)' | grep -v "tile probe" | sed "s/^/r$r first$ff: /" | tee -a $L
    echo "r$r first$ff $SECONDS s" | tee -a $L
  done
done
