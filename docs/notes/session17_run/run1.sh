#!/bin/bash
# Session 17, call 1: INT4_KGROUP's new AMX prefill. Its tests on real AMX (and the K-block/slab bitwise test, the
# reference test, real-shape accuracy at 4 and 64 tokens), then kt bench: the new build's INT4_KGROUP and AMXINT4 at
# 1-4096 tokens on both issue shapes, and main before it (kt_old, INT4_KGROUP on VNNI) at 512 and 4096 tokens.
set -o pipefail
C=$PWD/.carry/s17; D=/tmp/b; mkdir -p $D
for f in kt_new kt_old cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 150 $D/cpuexperts.test -test.run 'TestInt4KGroupAMXPrefill|TestAMXKBlockBitwise|TestMethodsAgainstReference|TestTileFormat|TestDeterministic' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)|kgroup_test|KGROUP.*rel err' | tee -a $L)
(cd moe/cpuexperts && KT_TEST_REAL_SHAPES=1 timeout 100 $D/cpuexperts.test -test.run 'TestRealShapeAccuracy' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)|relative' | tee -a $L)
echo "tests $SECONDS s" | tee -a $L
timeout 200 $D/kt_new bench --type moe --methods INT4_KGROUP,AMXINT4 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 3 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "new $SECONDS s" | tee -a $L
timeout 150 $D/kt_old bench --type moe --methods INT4_KGROUP --tokens 512,4096 --min-time 200ms --rounds 3 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
