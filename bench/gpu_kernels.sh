#!/usr/bin/env bash
# GPU kernel benchmarks of the CUDA backend (cuda.test, GPU time from CUDA
# events): the decode GEMV against the weights' copy rate (BenchmarkGEMV), the
# decode MoE op over bf16 experts against the copy bound (BenchmarkMoEDecode),
# the pick after the lm head (BenchmarkPick: greedy and sampled, per row), and
# a chain of dependent kernels with programmatic dependent launch on and off
# (BenchmarkLaunchChain, KT_CUDA_PDL=1 then 0).
#
#   bench/build.sh && bench/gpu_kernels.sh          # on the GPU machine
#   BENCH=GEMV bench/gpu_kernels.sh
#
# Settings: BENCH (a -test.bench pattern; default all four), N (iterations, 300).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CUDA_TEST=${CUDA_TEST:-$BIN/cuda.test}
need "$CUDA_TEST"
N=${N:-300}
cd "$ROOT/backend/cuda"
if [ -n "${BENCH:-}" ]; then
  "$CUDA_TEST" -test.run '^$' -test.bench "$BENCH" -test.benchtime "${N}x"
  exit
fi
"$CUDA_TEST" -test.run '^$' -test.bench 'GEMV$|GEMV/|MoEDecode|Pick' -test.benchtime "${N}x"
for pdl in 1 0; do
  echo "== KT_CUDA_PDL=$pdl"
  KT_CUDA_PDL=$pdl "$CUDA_TEST" -test.run '^$' -test.bench LaunchChain -test.benchtime 2000x
done
