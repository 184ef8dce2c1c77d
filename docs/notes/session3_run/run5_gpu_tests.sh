#!/bin/bash
set -o pipefail
C=$PWD/.carry/coord7; D=/tmp/b; mkdir -p $D
for f in cuda.test qwen3next.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
cd backend/cuda
echo "== cuda tests $(date +%T)"
KT_TESTDATA_MODELS=../../testdata/models timeout 200 $D/cuda.test -test.run '^(TestBackendOps|TestBackendGraphDecode|TestModelsMatchTransformers|TestChunkedPrefill|TestMixedBatch|TestGatedDeltaChunked|TestFP8MatMul|TestFP8Weight|TestFP8MoE|TestModelGraphDecode|TestLinearStateCopySlot|TestPrefixCacheModel)$' 2>&1 | grep -E "^(---|ok|PASS|FAIL|panic)|prefix|CopySlot" | head -60
cd ../../models/qwen3next
echo "== hybrid tests $(date +%T)"
KT_TESTDATA_MODELS=../../testdata/models timeout 150 $D/qwen3next.test -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' 2>&1 | grep -E "^(---|ok|PASS|FAIL|panic)" | head -20
echo "== end $(date +%T)"
