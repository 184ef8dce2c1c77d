#!/bin/bash
# Session 17, call 4: where the int4/int8 prefill's time goes at 512 tokens (16-32 rows per expert), where AMXINT4
# moves its weights at half the read probe and in about AMXINT8's time. Variants of the same build, alternated twice:
# default; every kernel on AVX-512 VNNI (--isa avx512); 8 workers; the int4 unpack in L1-sized pieces.
set -o pipefail
C=$PWD/.carry/s17; D=/tmp/b; mkdir -p $D
for f in kt_new2; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for r in 1 2; do
  for v in "default" "--isa avx512" "--cpuinfer 8" "--amx-int4-block 8"; do
    a=$v; [ "$v" = default ] && a=""
    timeout 100 $D/kt_new2 bench --type moe --methods AMXINT4,AMXINT8 --tokens 512 --min-time 300ms --phases $a 2>&1 \
      | grep -E '^(AMX|qwen|read)' | grep -v "tile probe" | sed "s/^/r$r $v: /" | tee -a $L
    echo "r$r $v $SECONDS s" | tee -a $L
  done
done
