#!/bin/bash
# Session 17, call 5: call 4 showed the int4 prefill at 512 tokens bound per core (8 workers 1.6-2x slower), the
# unpack streaming each call's int4 panels from memory with no prefetch. The unpack's prefetch distance
# (--amx-int4-prefetch: -1 none, 1024, 2048 = the new default, 4096), alternated twice, AMXINT4 and INT4_KGROUP at
# 256, 512 and 1024 tokens on both issue shapes.
set -o pipefail
C=$PWD/.carry/s17; D=/tmp/b; mkdir -p $D
for f in kt_new3; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for r in 1 2; do
  for pf in -1 1024 2048 4096; do
    timeout 100 $D/kt_new3 bench --type moe --methods AMXINT4,INT4_KGROUP --tokens 256,512,1024 --min-time 200ms --amx-int4-prefetch $pf 2>&1 \
      | grep -E '^(AMX|INT4|qwen|read)' | grep -v "tile probe" | sed "s/^/r$r pf$pf: /" | tee -a $L
    echo "r$r pf$pf $SECONDS s" | tee -a $L
  done
done
