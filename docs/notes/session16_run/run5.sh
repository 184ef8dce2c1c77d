#!/bin/bash
# Session 16, call 5: the final build. Its prefetch tests (engine and qwen3next hybrid, H100 + AMX), one hybrid
# decode each way as a check, then issue 7's targets: the Qwen3-30B prefill ratio in five rounds and the full
# tables of both issue shapes.
set -o pipefail
C=$PWD/.carry/s16; D=/tmp/b; mkdir -p $D
for f in kt_new qwen3next.test cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 120 $D/cpuexperts.test -test.run 'TestPrefetch|TestDeterministic|TestAMXKBlockBitwise' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)' | tee -a $L)
(cd models/qwen3next && timeout 200 $D/qwen3next.test -test.run 'TestHybridPrefetch|TestHybridMatchesCPU|TestHybridDeferral' -test.v 2>&1 \
  | grep -E '^(--- |PASS|FAIL|ok)|prefetch \(|panic' | cut -c1-300 | tee -a $L)
echo "tests $SECONDS s" | tee -a $L
timeout 150 $D/kt_new bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
timeout 330 $D/kt_new bench --type moe --methods AMXINT4,AMXINT8,AMXBF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 3 --compare-torch 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
