#!/bin/bash
# Session 18, call 4 (kt_fuse2, call 3's build): (1) with the fused int4 unpack, where should int4 experts switch from
# the VNNI decode kernels to AMX? --amx-min-tokens 8 (default) against 4, alternated twice, at 64-256 tokens;
# (2) the AMX core's B-tile prefetch distance where experts get few rows: AMXINT8 at 256 and 512 tokens with
# --amx-prefetch 1 (default), 2 and 4 steps, alternated twice.
set -o pipefail
C=$PWD/.carry/s18; D=/tmp/b; mkdir -p $D
for f in kt_fuse2; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for r in 1 2; do
  for mn in 8 4; do
    timeout 100 $D/kt_fuse2 bench --type moe --methods AMXINT4,INT4_KGROUP --tokens 64,128,256 --min-time 200ms --amx-min-tokens $mn 2>&1 \
      | grep -E '^(AMX|INT4)' | grep -v "tile probe" | sed "s/^/r$r min$mn: /" | tee -a $L
    echo "r$r min$mn $SECONDS s" | tee -a $L
  done
done
for r in 1 2; do
  for pf in 1 2 4; do
    timeout 80 $D/kt_fuse2 bench --type moe --methods AMXINT8 --tokens 256,512 --min-time 200ms --amx-prefetch $pf 2>&1 \
      | grep -E '^(AMX|INT4)' | grep -v "tile probe" | sed "s/^/r$r pf$pf: /" | tee -a $L
    echo "r$r pf$pf $SECONDS s" | tee -a $L
  done
done
