#!/bin/bash
# session 11 call 11: the GPU tests after the session's last changes (prefix cache pages past the snapshot, engine
# spin 1.5 ms): the CUDA prefix and model tests, the qwen3next hybrid, layerwise and graph tests.
set -o pipefail
C=$PWD/.carry/s11c11; D=/tmp/b; mkdir -p $D
for f in cuda qwen3next; do xz -dc $C/$f.test.xz > $D/$f.test; chmod +x $D/$f.test; done
L=$OUT/log.txt
export KT_TESTDATA_MODELS=$PWD/testdata/models
(cd backend/cuda && timeout 300 $D/cuda.test -test.timeout 290s 2>&1 | grep -E "^(--- FAIL|FAIL|ok|PASS|panic)|RESULT .*(branch|prefix)" | tail -20 | sed 's/^/cuda: /' | tee -a $L)
(cd models/qwen3next && timeout 200 $D/qwen3next.test -test.v -test.timeout 190s -test.run '^(TestLayerwisePrefill|TestDynamicExpertUpdate|TestHybrid.*|TestGraphDecodeIdentical|TestNonExpertLoRAOnGPU|TestLoRAEngineAndHybrid)$' 2>&1 | grep -E '^(--- |PASS|FAIL|ok|panic)' | sed 's/^/qwen3next: /' | tee -a $L)
echo "end $SECONDS s" | tee -a $L
