#!/bin/bash
# Session 17, call 7: the decode kernels (int8, int4, group-wise int4, bf16 panels) prefetching their panel on its
# first pass for several tokens too, not one token only (kt_dec), against the build before (kt_final, call 6),
# alternated twice at 64, 128 and 256 tokens (2-16 tokens per expert: the decode kernels and the smallest AMX calls).
set -o pipefail
C=$PWD/.carry/s17; D=/tmp/b; mkdir -p $D
for f in kt_dec kt_final; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for r in 1 2; do
  for b in kt_final kt_dec; do
    timeout 120 $D/$b bench --type moe --methods AMXINT4,INT4_KGROUP,AMXINT8,AMXBF16 --tokens 64,128,256 --min-time 200ms 2>&1 \
      | grep -E '^(AMX|INT4|qwen|read)' | grep -v "tile probe" | sed "s/^/r$r $b: /" | tee -a $L
    echo "r$r $b $SECONDS s" | tee -a $L
  done
done
