#!/bin/bash
# Session 18, call 6 (kt_ring): the int8 panels staged through the L1 ring (Config.AMXInt8Ring). TestAMXRingKernel on
# real AMX; BenchmarkIntFewRows (every format: the ring with its prefetch at 0/1024/2048/4096 bytes, int8's tile
# prefetch at 2 and 4 steps); the engine, AMXINT8 at 256, 512 and 1024 tokens, --amx-int8-ring 32 against -1,
# alternated twice.
set -o pipefail
C=$PWD/.carry/s18; D=/tmp/b; mkdir -p $D
for f in kt_ring cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 60 $D/cpuexperts.test -test.run 'AMXRingKernel|AMXKBlock' -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS)' | tee -a $L
timeout 90 $D/cpuexperts.test -test.run XXX -test.bench 'IntFewRows' -test.benchtime 1x 2>&1 | grep Benchmark | tee -a $L
echo "fewrows $SECONDS s" | tee -a $L
for r in 1 2; do
  for th in -1 32; do
    timeout 70 $D/kt_ring bench --type moe --methods AMXINT8 --tokens 256,512,1024 --min-time 200ms --amx-int8-ring $th 2>&1 \
      | grep -E '^(AMX|INT4)' | grep -v "tile probe" | sed "s/^/r$r ring$th: /" | tee -a $L
    echo "r$r ring$th $SECONDS s" | tee -a $L
  done
done
