#!/bin/bash
# Session 18, call 2: the int4 AMX prefill with the unpack fused into the tile loop (calls of <= 32 tokens,
# Config.AMXInt4Fused; kt_fuse): engine tests on real AMX; BenchmarkIntFewRows with the fused variants; kt bench at
# 256-1024 tokens (experts get 8-32 / 16-64 tokens) fused (default) against --amx-int4-fused -1, alternated twice,
# and with the unpack's prefetch at 2048 bytes.
set -o pipefail
C=$PWD/.carry/s18; D=/tmp/b; mkdir -p $D
for f in kt_fuse cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 200 $D/cpuexperts.test -test.run 'AMXInt4Fused|Int4KGroupAMX|AMXKBlock|DecodePrefetch|TileFormat|RealShape' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|rel' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
timeout 120 $D/cpuexperts.test -test.run XXX -test.bench 'IntFewRows/int4' -test.benchtime 1x 2>&1 | grep Benchmark | tee -a $L
echo "fewrows $SECONDS s" | tee -a $L
for r in 1 2; do
  for fz in -1 0 0p; do
    extra="--amx-int4-fused ${fz%p}"; [ "$fz" = 0p ] && extra="$extra --amx-int4-prefetch 2048"
    timeout 150 $D/kt_fuse bench --type moe --methods AMXINT4,INT4_KGROUP --tokens 256,512,1024 --min-time 200ms $extra 2>&1 \
      | grep -E '^(AMX|INT4|qwen|read)' | grep -v "tile probe" | sed "s/^/r$r fused$fz: /" | tee -a $L
    echo "r$r fused$fz $SECONDS s" | tee -a $L
  done
done
