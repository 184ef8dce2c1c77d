#!/bin/bash
# session 4 call 9: m_gemv_bf16_wide — GPU tests, decode A/B against KT_CUDA_GEMV=narrow in one binary
set -o pipefail
C=$PWD/.carry/p9; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
export KT_TESTDATA_MODELS=$PWD/testdata/models
(cd backend/cuda; timeout 200 $D/cuda.test -test.run '^(TestBackendOps|TestModelsMatchTransformers|TestModelGraphDecode|TestChunkedPrefill|TestMixedBatch|TestBackendGraphDecode|TestGemm)$' -test.v 2>&1 | grep -E "^(--- |ok|PASS|FAIL|panic)|^    --- FAIL|gemv vs split" | head -30)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256"
for i in 1 2 3; do for v in narrow wide; do
 echo "== $v allgpu"; KT_CUDA_GEMV=$([ $v = narrow ] && echo narrow || echo 1) timeout 60 $G --experts backend 2>&1 | grep -iE "per token" | cut -c1-120
 echo "== $v hybrid D=0"; KT_CUDA_GEMV=$([ $v = narrow ] && echo narrow || echo 1) KT_HYBRID_TIMING=1 timeout 60 $G --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 2>&1 | grep -iE "tok/s|timing" | cut -c1-330
done; done
