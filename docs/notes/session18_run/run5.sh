#!/bin/bash
# Session 18, call 5 (kt_fuse3: the fused int4 kernel over any number of 32-token blocks): the engine's tests on real
# AMX; then the fused-call threshold --amx-int4-fused 32 (default) / 64 / 256 at 1024 and 2048 tokens (Qwen3.5 32 and
# 64 tokens per expert, Qwen3-30B 64 and 128), alternated twice.
set -o pipefail
C=$PWD/.carry/s18; D=/tmp/b; mkdir -p $D
for f in kt_fuse3 cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 150 $D/cpuexperts.test -test.run 'AMXInt4Fused|Int4KGroupAMX|AMXKBlock|DecodePrefetch|MethodsAgainstReference|Deterministic|TileFormat' -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS)' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
for r in 1 2; do
  for th in 32 64 256; do
    timeout 90 $D/kt_fuse3 bench --type moe --methods AMXINT4,INT4_KGROUP --tokens 1024,2048 --min-time 200ms --amx-int4-fused $th 2>&1 \
      | grep -E '^(AMX|INT4)' | grep -v "tile probe" | sed "s/^/r$r th$th: /" | tee -a $L
    echo "r$r th$th $SECONDS s" | tee -a $L
  done
done
