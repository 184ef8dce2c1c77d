#!/bin/bash
# session 11 call 1: the GPU tests of session 10's last commits (2db84a5 scratch checks, d116463 shared
# split_bf16 / moeGrouped.sized, e83d3e5 stageGroup), which no device had run yet.
set -o pipefail
C=$PWD/.carry/s11c1; D=/tmp/b; mkdir -p $D; L=$OUT/log.txt
for f in cuda qwen3next routed; do xz -dc $C/$f.test.xz > $D/$f.test; chmod +x $D/$f.test; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
(cd backend/cuda && timeout 300 $D/cuda.test -test.timeout 290s 2>&1 | tail -25 | sed 's/^/cuda: /' | tee -a $L)
(cd models/internal/routed && timeout 120 $D/routed.test -test.timeout 110s 2>&1 | tail -8 | sed 's/^/routed: /' | tee -a $L)
(cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 200 $D/qwen3next.test -test.v -test.timeout 190s -test.run '^(TestLayerwisePrefill|TestDynamicExpertUpdate|TestHybrid.*|TestGraphDecodeIdentical|TestNonExpertLoRAOnGPU|TestLoRAEngineAndHybrid)$' 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|moe|grouped' | tail -40 | sed 's/^/qwen3next: /' | tee -a $L)
echo "end $SECONDS s" | tee -a $L
