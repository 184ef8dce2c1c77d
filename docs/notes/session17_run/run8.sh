#!/bin/bash
# Session 17, call 8: with call 7's decode-kernel prefetch, where should experts switch from the vector decode kernels
# to the AMX prefill kernels? --amx-min-tokens 8 (the default), 16, 32, alternated twice, int4/int8 methods at 256,
# 512 and 1024 tokens (Qwen3.5 8/16/32 tokens per expert, Qwen3-30B 16/32/64).
set -o pipefail
C=$PWD/.carry/s17; D=/tmp/b; mkdir -p $D
for f in kt_min; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for r in 1 2; do
  for mn in 8 16 32; do
    timeout 120 $D/kt_min bench --type moe --methods AMXINT4,INT4_KGROUP,AMXINT8 --tokens 256,512,1024 --min-time 200ms --amx-min-tokens $mn 2>&1 \
      | grep -E '^(AMX|INT4|qwen|read)' | grep -v "tile probe" | sed "s/^/r$r min$mn: /" | tee -a $L
    echo "r$r min$mn $SECONDS s" | tee -a $L
  done
done
