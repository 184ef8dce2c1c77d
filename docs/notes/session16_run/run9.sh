#!/bin/bash
# Session 16, call 9: after the review commit, the hybrid and engine tests on the GPU machine.
set -o pipefail
C=$PWD/.carry/s16; D=/tmp/b; mkdir -p $D
for f in qwen3next.test cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd models/qwen3next && timeout 240 $D/qwen3next.test -test.run 'TestHybrid' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)|prefetch \(|panic' | cut -c1-200 | tee -a $L)
(cd moe/cpuexperts && timeout 200 $D/cpuexperts.test -test.run 'TestPrefetch|TestDeterministic|TestAMXKBlockBitwise|TestMethodsAgainstReference' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)' | tee -a $L)
echo "end $SECONDS s" | tee -a $L
