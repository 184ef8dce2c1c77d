#!/usr/bin/env bash
# Hybrid decode at DeepSeek-V3 or Kimi-K2 widths (hidden 7168, 2048-wide
# experts, 256 or 384 of them, top-8): a synthetic checkpoint of SYNTH_LAYERS
# layers (the first dense, the rest MoE), routed experts on the CPU expert
# engine, the rest on the GPU. Batch 1: kt generate, TOKENS sampled tokens
# (t = 1), ROUNDS rounds. Batch 8: bench/serve.sh at concurrency 8 (sampled
# t = 1). Beside them, in the same run, the read probe and the CPU decode bound
# of the checkpoint's routed experts (kt doctor --measure).
#
#   bench/build.sh && bench/deepseek_decode.sh                 # on the GPU machine
#   MODEL_SHAPE=kimi-k2 SYNTH_LAYERS=2 bench/deepseek_decode.sh
#
# Settings: MODEL_SHAPE (deepseek-v3 or kimi-k2), SYNTH_LAYERS (3),
# ROUNDS (2), TOKENS (128), METHOD (AMXINT4), CPUINFER (15), BATCH8 (1: also
# run batch 8), DIR (/tmp/kt-synth-MODEL_SHAPE-SYNTH_LAYERS).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
MODEL_SHAPE=${MODEL_SHAPE:-deepseek-v3} ROUNDS=${ROUNDS:-2} TOKENS=${TOKENS:-128} METHOD=${METHOD:-AMXINT4}
CPUINFER=${CPUINFER:-15} BATCH8=${BATCH8:-1}
export SYNTH_LAYERS=${SYNTH_LAYERS:-3}
model=${DIR:-/tmp/kt-synth-$MODEL_SHAPE-$SYNTH_LAYERS}
builds
synth "$MODEL_SHAPE" "$model"
echo "== probe before"; probe "$model"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for i in $(order "$r"); do
    rc=0
    KT_HYBRID_TIMING=1 timeout 600 "${BUILDS[$i]}" generate --model-path "$model" --input-ids "$PROMPT_IDS" --ignore-eos \
      --device cuda --max-new-tokens "$TOKENS" --temperature 1 --seed "$r" --kt-weight-path "$model" \
      --kt-method "$METHOD" --kt-cpuinfer "$CPUINFER" >/dev/null 2>"$tmp/err" || rc=$?
    echo "round $r $(label "$i") batch 1: $(grep -oE 'decode [0-9.]+ tok/s' "$tmp/err" | tail -1), rc $rc"
    grep -E 'hand-off timing|prediction|load|rror' "$tmp/err" | cut -c1-300 | sed 's/^/    /' || true
  done
done
if [ "$BATCH8" = 1 ]; then
  MODEL=$model MODE=hybrid CONCURRENCY=8 NUM_PROMPTS=16 INPUT_LEN=64 OUTPUT_LEN=64 \
    EXTRA_BODY='{"temperature":1}' "$(dirname "$0")/serve.sh"
fi
echo "== probe after"; probe "$model"
