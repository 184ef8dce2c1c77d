#!/bin/bash
# Session 21, call 1: the fused decode ops (backend.Route: router GEMV + top-k in one launch; backend.SumRMSNorm: the
# MoE layer's routed + shared sum folded into the residual add and norm; backend.ConvGates: conv1d + delta gates in one
# grid). Their GPU tests and the CUDA/model tests around them; then decode on the synthetic 8-layer Qwen3.5 checkpoint,
# this build (kt) against the session's start (kt_old, e65c801), alternated: wholly on the GPU (256 tokens) and hybrid
# AMXINT4 D = 0 (512 tokens, KT_HYBRID_TIMING=1: the GPU wait per MoE layer), token ids compared (md5).
set -o pipefail
C=$PWD/.carry/s21; D=/tmp/b; mkdir -p $D
for f in kt kt_old cuda.test qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== CUDA tests" | tee -a $L
(cd backend/cuda && timeout 240 $D/cuda.test -test.v -test.run 'TestRouteFused|TestSumRMSNorm|TestConvGates|TestRouterTopKReg|TestBackendOps|TestLinearDecodeKernels|TestNormKernels|TestKernelSources|TestGraph|TestBackendGraphDecode' 2>&1 \
  | grep -E -- '^--- (PASS|FAIL)|^(PASS|FAIL|ok)|panic|_test.go:[0-9]+:' | tee $D/cuda_tests.txt | grep -v -- '--- PASS' | head -40 | tee -a $L; echo "passed: $(grep -c -- '--- PASS' $D/cuda_tests.txt)" | tee -a $L)
for m in qwen3next qwen3moe; do
  echo "== $m tests ($SECONDS s)" | tee -a $L
  (cd models/$m && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 200 $D/$m.test -test.v -test.timeout 190s 2>&1 \
    | grep -E -- '^--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|panic' | tee $D/${m}_tests.txt | grep -v -- '--- PASS' | head -30 | tee -a $L; echo "$m passed: $(grep -c -- '--- PASS' $D/${m}_tests.txt)" | tee -a $L)
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 bin=$2 tok=$3; shift 3
  KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens $tok "$@" > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-230 | sed "s/^/$tag: /" | tee -a $L; }
echo "== decode wholly on the GPU ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  for b in kt_old kt; do gen "gpu $b r$r" $b 256; done
done
echo "== hybrid AMXINT4 D0 ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then o="kt_old kt"; else o="kt kt_old"; fi
  for b in $o; do gen "hybrid $b r$r" $b 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15; done
done
echo "end $SECONDS s" | tee -a $L
