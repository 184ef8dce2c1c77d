#!/usr/bin/env bash
# Prefill time of one long prompt (one chunk) on a synthetic 8-layer
# checkpoint at Qwen3.5-35B-A3B widths, three ways in each round:
#   gpu        the whole model on the GPU, every expert in VRAM;
#   hybrid     routed experts on the CPU expert engine (AMX prefill), the rest
#              on the GPU;
#   layerwise  the hybrid step with --kt-gpu-prefill-token-threshold 1024:
#              every MoE layer's experts uploaded to the GPU while the layer
#              before computes, and run there.
# kt generate prints "N prompt tokens in Ts (R tok/s)"; 8 new tokens follow.
#
#   bench/build.sh && bench/prefill.sh                 # on the GPU machine
#   LENGTHS="4096" WAYS="hybrid layerwise" bench/prefill.sh
#
# Settings: LENGTHS ("4096 8192"), WAYS ("gpu hybrid layerwise"), ROUNDS (2),
# METHOD (AMXINT4), CPUINFER (15). KT_A / KT_B alternate two builds.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
LENGTHS=${LENGTHS:-4096 8192} WAYS=${WAYS:-gpu hybrid layerwise} ROUNDS=${ROUNDS:-2}
METHOD=${METHOD:-AMXINT4} CPUINFER=${CPUINFER:-15}
builds
model=$SYNTH_Q35
synth qwen3next "$model"
ids() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), (i * 37) % 150000 + 10 }'; }
run() { # run I WAY LENGTH TAG
  local extra=()
  case $2 in
    gpu) ;;
    hybrid) extra=(--kt-weight-path "$model" --kt-method "$METHOD" --kt-cpuinfer "$CPUINFER") ;;
    layerwise) extra=(--kt-weight-path "$model" --kt-method "$METHOD" --kt-cpuinfer "$CPUINFER" --kt-gpu-prefill-token-threshold 1024) ;;
  esac
  timeout 300 "${BUILDS[$1]}" generate --model-path "$model" --input-ids "$(ids "$3")" --max-new-tokens 8 --ignore-eos \
    --device cuda --chunked-prefill-size "$3" "${extra[@]}" 2>&1 >/dev/null |
    grep -E 'prompt tokens in|rror' | sed -E 's/, [0-9]+ new tokens.*//' | cut -c1-200 | sed "s/^/$4: /" || true
}
for n in $LENGTHS; do
  for w in $WAYS; do run 0 "$w" "$n" "warm-up $w $n" >/dev/null; done # page cache and kernel cache
  for r in $(seq 1 "$ROUNDS"); do
    for i in $(order "$r"); do
      for w in $WAYS; do run "$i" "$w" "$n" "round $r $(label "$i") $w"; done
    done
  done
done
