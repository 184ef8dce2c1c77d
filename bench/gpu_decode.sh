#!/usr/bin/env bash
# Decode at batch 1 with the whole model on the GPU (kt generate --device cuda,
# no CPU expert method: every expert in VRAM, decode steps replayed as one CUDA
# graph), on a synthetic 8-layer checkpoint at Qwen3.5-35B-A3B widths. Greedy,
# 256 new tokens, ROUNDS rounds. With one build, each round also runs it with
# KT_CUDA_PDL=0 (kernels launched the plain way instead of with programmatic
# dependent launch) as the same-run baseline. The weights' copy bound: 1.60 GB
# read per token at ~3 TB/s, ~1880 tok/s.
#
#   bench/build.sh && bench/gpu_decode.sh                     # on the GPU machine
#   KT_A=bin/kt_main KT_B=bin/kt bench/gpu_decode.sh          # two builds, alternated
#   FAMILY=qwen3moe EXTRA='--temperature 1 --seed 7' bench/gpu_decode.sh
#
# Settings: ROUNDS (3), TOKENS (256), FAMILY (qwen3next, or qwen3moe for the
# Qwen3-30B-A3B widths), EXTRA (more kt generate flags).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3} TOKENS=${TOKENS:-256} FAMILY=${FAMILY:-qwen3next} EXTRA=${EXTRA:-}
builds
model=$SYNTH_Q35; [ "$FAMILY" = qwen3moe ] && model=$SYNTH_Q3
synth "$FAMILY" "$model"
tmp=$(mktemp -d)
run() { # run I PDL TAG
  local rc=0 tps
  KT_CUDA_PDL=$2 timeout 300 "${BUILDS[$1]}" generate --model-path "$model" --input-ids "$PROMPT_IDS" --ignore-eos \
    --device cuda --max-new-tokens "$TOKENS" $EXTRA >"$tmp/out" 2>"$tmp/err" || rc=$?
  tps=$(sed -nE 's/.*decode ([0-9.]+) tok\/s.*/\1/p' "$tmp/err" | tail -1)
  echo "$3: decode ${tps:-?} tok/s, ids $(md5sum <"$tmp/out" | cut -c1-8), rc $rc"
  grep -E 'rror' "$tmp/err" | cut -c1-300 || true
  if [ -n "$tps" ]; then echo "$tps" >>"$tmp/tps.$1.$2"; fi
}
run 0 1 warm-up >/dev/null
rm -f "$tmp"/tps.*
for r in $(seq 1 "$ROUNDS"); do
  for i in $(order "$r"); do
    run "$i" 1 "round $r $(label "$i")"
    if [ ${#BUILDS[@]} = 1 ]; then run "$i" 0 "round $r kt KT_CUDA_PDL=0"; fi
  done
done
for f in "$tmp"/tps.*; do
  [ -e "$f" ] || continue
  set -- $(basename "$f" | tr . ' ')
  echo "median $(label "$2")$([ "$3" = 0 ] && echo ' KT_CUDA_PDL=0'): $(median <"$f") tok/s over $ROUNDS rounds"
done
rm -rf "$tmp"
