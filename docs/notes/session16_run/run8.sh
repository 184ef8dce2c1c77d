#!/bin/bash
# Session 16, call 8: the final build's tests on the GPU machine: qwen3next hybrid (prefetch, placements with
# all-GPU layers, deferral, graphs), cpuexperts prefetch and AMX bitwise tests, doctor perf (with an unserved
# architecture's decode bound).
set -o pipefail
C=$PWD/.carry/s16; D=/tmp/b; mkdir -p $D
for f in qwen3next.test cpuexperts.test doctor.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd models/qwen3next && timeout 240 $D/qwen3next.test -test.run 'TestHybrid' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)|panic' | tee -a $L)
(cd moe/cpuexperts && timeout 200 $D/cpuexperts.test -test.run 'TestPrefetch|TestDeterministic|TestAMXKBlockBitwise|TestMethodsAgainstReference' 2>&1 | tail -2 | tee -a $L)
(cd doctor && timeout 100 $D/doctor.test -test.run 'TestPerf' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)' | tee -a $L)
echo "end $SECONDS s" | tee -a $L
