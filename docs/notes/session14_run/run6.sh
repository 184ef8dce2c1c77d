#!/bin/bash
# session 14 call 6: the decode MoE kernels without staging (m_moe_gateup_bf16 / m_moe_down_bf16 read their input row
# from global memory). Every CUDA test; BenchmarkMoEDecode; all-GPU decode of the 8-layer Qwen3.5 (greedy) and
# Qwen3-30B (t = 1, seed 7) checkpoints, the build before (kt_prev, programmatic dependent launch only) alternated.
set -o pipefail
C=$PWD/.carry/s14c6; D=/tmp/b; mkdir -p $D
for f in kt kt_prev cuda.test qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== every CUDA test" | tee -a $L
(cd backend/cuda && timeout 300 $D/cuda.test -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL)|^(PASS|FAIL|ok)|panic' | tee $D/cuda_tests.txt | grep -v -- '--- PASS' | tee -a $L; echo "passed: $(grep -c -- '--- PASS' $D/cuda_tests.txt)" | tee -a $L)
(cd backend/cuda && timeout 200 $D/cuda.test -test.run XXX -test.bench 'MoEDecode' -test.benchtime 200x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 bin=$2 m=$3; shift 3
  timeout 100 $D/$bin generate --model-path $m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 "$@" 2>&1 \
    | grep -E 'new tokens' | sed "s/^/$tag: /" | tee -a $L; }
echo "== decode wholly on the GPU ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  for bin in kt_prev kt; do gen "q35 $bin r$r" $bin /tmp/q35; done
  for bin in kt_prev kt; do gen "q3 $bin r$r" $bin /tmp/q3 --temperature 1 --seed 7; done
done
echo "end $SECONDS s" | tee -a $L
