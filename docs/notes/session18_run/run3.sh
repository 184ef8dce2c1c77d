#!/bin/bash
# Session 18, call 3: the new int4 defaults (kt_fuse2: the fused unpack for calls of <= 32 tokens, its prefetch at
# 2048 bytes for both formats) against the previous behaviour (--amx-int4-fused -1, and for AMXINT4 no unpack
# prefetch), alternated twice per method at 256, 512 and 4096 tokens (4096: calls of > 32 tokens, unchanged: a
# control); the fused unpack's prefetch distance in BenchmarkIntFewRows (int4 formats).
set -o pipefail
C=$PWD/.carry/s18; D=/tmp/b; mkdir -p $D
for f in kt_fuse2 cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 60 $D/cpuexperts.test -test.run XXX -test.bench 'IntFewRows/int4.*streamed' -test.benchtime 1x 2>&1 | grep Benchmark | tee -a $L
echo "fewrows $SECONDS s" | tee -a $L
for r in 1 2; do
  for cfg in "AMXINT4|new|" "AMXINT4|old|--amx-int4-fused -1 --amx-int4-prefetch -1" "INT4_KGROUP|new|" "INT4_KGROUP|old|--amx-int4-fused -1"; do
    IFS='|' read -r m name extra <<< "$cfg"
    timeout 100 $D/kt_fuse2 bench --type moe --methods $m --tokens 256,512,4096 --min-time 200ms $extra 2>&1 \
      | grep -E '^(AMX|INT4|read)' | grep -v "tile probe" | sed "s/^/r$r $m $name: /" | tee -a $L
    echo "r$r $m $name $SECONDS s" | tee -a $L
  done
done
