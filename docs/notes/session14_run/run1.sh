#!/bin/bash
# session 14 call 1: programmatic dependent launch (KT_GRID_DEP in every kernel, cuLaunchKernelEx with programmatic
# stream serialization; KT_CUDA_PDL=0 turns it off). The launch structs against cuda.h; every CUDA test; the hybrid
# and graph tests of qwen3next; BenchmarkLaunchChain; decode tok/s on the 8-layer synthetic Qwen3.5, wholly on the
# GPU and hybrid AMXINT4, early launch off and on alternated.
set -o pipefail
C=$PWD/.carry/s14c1; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== cuda.h layout" | tee -a $L
cat > $D/lay.c <<'C'
#include <cuda.h>
#include <stdio.h>
#include <stddef.h>
int main(void) {
  printf("sizeof CUlaunchAttribute %zu, value at %zu; sizeof CUlaunchConfig %zu, hStream at %zu, attrs at %zu, numAttrs at %zu; PSS id %d\n",
    sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value), sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, hStream),
    offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs), (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  return 0; }
C
CI=$(dirname $(dirname $(which nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)))/include
gcc -I$CI -o $D/lay $D/lay.c && $D/lay | tee -a $L
echo "== early-launch test and chain benchmark ($SECONDS s)" | tee -a $L
(cd backend/cuda && timeout 120 $D/cuda.test -test.run 'TestEarlyLaunchChain|TestKernelsWait' -test.v 2>&1 | grep -E -- '---|early launch|wrong|counted|ok|FAIL|PASS|panic' | head -20 | tee -a $L)
(cd backend/cuda && timeout 120 $D/cuda.test -test.run XXX -test.bench 'LaunchChain' -test.benchtime 2000x -test.count 2 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L)
echo "== GEMV, early launch on / off ($SECONDS s)" | tee -a $L
for pdl in 1 0; do (cd backend/cuda && KT_CUDA_PDL=$pdl timeout 120 $D/cuda.test -test.run XXX -test.bench 'GEMV/' -test.benchtime 300x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/pdl=$pdl /" | tee -a $L); done
echo "== every CUDA test ($SECONDS s)" | tee -a $L
(cd backend/cuda && timeout 300 $D/cuda.test -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL)|^(PASS|FAIL|ok)|panic' | tee $D/cuda_tests.txt | grep -v -- '--- PASS' | tee -a $L; echo "passed: $(grep -c -- '--- PASS' $D/cuda_tests.txt)" | tee -a $L)
echo "== qwen3next GPU tests ($SECONDS s)" | tee -a $L
(cd models/qwen3next && timeout 300 $D/qwen3next.test -test.run 'Hybrid|GPU|Graph|Layerwise' -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|panic' | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1; shift
  timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 "$@" 2>&1 \
    | grep -E 'tok/s|decode' | tail -2 | sed "s/^/$tag: /" | tee -a $L; }
echo "== decode ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  for pdl in 0 1; do KT_CUDA_PDL=$pdl gen "gpu pdl=$pdl r$r"; done
done
for r in 1 2 3; do
  for pdl in 0 1; do
    KT_CUDA_PDL=$pdl gen "hybrid D0 pdl=$pdl r$r" --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4
    KT_CUDA_PDL=$pdl gen "hybrid D4 pdl=$pdl r$r" --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --kt-max-deferred-experts-per-token 4
  done
done
echo "end $SECONDS s" | tee -a $L
