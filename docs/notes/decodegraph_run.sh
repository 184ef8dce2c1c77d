#!/bin/bash
# decodegraph device run: GPU tests, then decode tok/s of the 8-layer synthetic Qwen3.5 in one run.
set -o pipefail
R=$(pwd); B=$R/.carry/decodegraph; export KT_TESTDATA_MODELS=$R/testdata/models
log() { echo "== $(date +%T) $*"; }
log start; nproc; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cd $R/backend/cuda
log TestModelGraphDecode
timeout 100 $B/cuda.test -test.v -test.run '^TestModelGraphDecode$' > $OUT/graphtest.txt 2>&1; echo "rc=$?"
grep -E '^(\s*--- |FAIL|ok|PASS)|RESULT|graph' $OUT/graphtest.txt | tail -20
log TestModelGraphDecode KT_CUDA_GEMV=1
KT_CUDA_GEMV=1 timeout 60 $B/cuda.test -test.v -test.run '^TestModelGraphDecode$' 2>&1 | grep -E '^(\s*--- |FAIL|ok|PASS)|RESULT|graph' | tail -12
cd $R
log synth
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 $B/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 -test.v 2>&1 | grep -E 'GB|ok|FAIL|PASS' | tail -3
log StreamRead
$B/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream|GB'
G="$B/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos"
run() { log "$@"; timeout 90 $G "$@" 2>&1 | grep -E 'decode|running on|rror' ; }
run --device cuda --experts backend
run --device cuda --experts backend --disable-cuda-graph
run --device cuda --experts backend
log KT_CUDA_GEMV=1; KT_CUDA_GEMV=1 run --device cuda --experts backend
log KT_CUDA_GEMV=1; KT_CUDA_GEMV=1 run --device cuda --experts backend --disable-cuda-graph
run --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method BF16
run --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4
run --device cpu --kt-method BF16 --kt-cpuinfer 15
if [ "${SKIP_OLD:-0}" != 1 ]; then
cd $R/backend/cuda; log existing GPU tests
timeout ${OLD_T:-100} $B/cuda.test -test.v -test.run '^(TestBackendOps|TestBackendGraphDecode|TestModelsMatchTransformers|TestChunkedPrefill|TestMixedBatch|TestGatedDeltaChunked)$' > $OUT/tests.txt 2>&1; echo "rc=$?"
grep -E '^(--- |FAIL|ok|PASS)|RESULT' $OUT/tests.txt | tail -40
fi
log end
