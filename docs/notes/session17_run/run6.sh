#!/bin/bash
# Session 17, call 6: the final build. Its engine tests on real AMX (INT4_KGROUP's AMX prefill, the K-block/slab/piece
# bitwise test, the method and determinism tests, real-shape accuracy), then the final INT4_KGROUP and AMXINT4 table on
# both issue shapes.
set -o pipefail
C=$PWD/.carry/s17; D=/tmp/b; mkdir -p $D
for f in kt_final cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 150 $D/cpuexperts.test -test.run 'TestInt4KGroupAMXPrefill|TestAMXKBlockBitwise|TestMethodsAgainstReference|TestTileFormat|TestDeterministic|TestFusedMatchesPhased|TestPrefetch' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)|kgroup_test' | tee -a $L)
(cd moe/cpuexperts && KT_TEST_REAL_SHAPES=1 timeout 100 $D/cpuexperts.test -test.run 'TestRealShapeAccuracy' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)|KGROUP' | tee -a $L)
echo "tests $SECONDS s" | tee -a $L
timeout 240 $D/kt_final bench --type moe --methods INT4_KGROUP,AMXINT4 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 3 --compare-torch 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
