#!/usr/bin/env bash
# Decode at batch 1 with the whole model on the CPU (the routed experts on the
# CPU expert engine), on the synthetic 8-layer checkpoints: the packages'
# BenchmarkDecodeSynthetic after a short prompt. CPU decode streams every
# weight a token touches once, so its baseline is the read bandwidth measured
# in the same run (kt doctor --measure before and after; the qwen3moe
# benchmark also runs its own probe and prints the share of that bound).
#
#   bench/build.sh && bench/cpu_decode.sh          # any machine with the memory
#   FAMILIES=qwen3moe STEPS=20 bench/cpu_decode.sh
#
# Settings: FAMILIES ("qwen3next qwen3moe"), STEPS (decode steps, 40).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
FAMILIES=${FAMILIES:-qwen3next qwen3moe} STEPS=${STEPS:-40}
builds
for f in $FAMILIES; do
  model=$SYNTH_Q35 test=$QWEN3NEXT_TEST
  if [ "$f" = qwen3moe ]; then model=$SYNTH_Q3 test=$QWEN3MOE_TEST; fi
  need "$test"
  synth "$f" "$model"
  echo "== $f: probe before"; probe "$model"
  KT_SYNTH_DIR=$model "$test" -test.run '^$' -test.bench DecodeSynthetic -test.benchtime "${STEPS}x" -test.v 2>&1 |
    grep -E 'Benchmark|experts|FAIL|panic' | cut -c1-300
  echo "== $f: probe after"; probe "$model"
done
