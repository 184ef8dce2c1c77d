#!/usr/bin/env bash
# Hybrid decode at batch 1: the routed experts on the CPU expert engine, the
# rest of the model on the GPU (kt generate --device cuda --kt-method M), on a
# synthetic 8-layer checkpoint at Qwen3.5-35B-A3B widths. Greedy, 512 new
# tokens from the same 8-token prompt, ROUNDS rounds; the read bandwidth and
# the CPU decode bound of the checkpoint's routed experts (kt doctor
# --measure) before the first round and after the last, since decode follows
# the host's memory bandwidth. KT_HYBRID_TIMING=1 adds the per-step GPU wait
# and CPU expert time. The ids of every run are hashed: they must agree.
#
#   bench/build.sh && bench/hybrid_decode.sh                  # on the GPU machine
#   DEFER=4 bench/hybrid_decode.sh                            # expert deferral
#   FAMILY=qwen3moe EXTRA='--temperature 1 --seed 7' bench/hybrid_decode.sh
#   KT_A=bin/kt_main KT_B=bin/kt bench/hybrid_decode.sh       # two builds, alternated
#
# Settings: ROUNDS (6), TOKENS (512), METHOD (AMXINT4), CPUINFER (15: one core
# left to the GPU thread), DEFER (0), FAMILY (qwen3next; qwen3moe for the
# Qwen3-30B-A3B widths, whose greedy decode repeats one token: sample it),
# EXTRA (more kt generate flags).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-6} TOKENS=${TOKENS:-512} METHOD=${METHOD:-AMXINT4} CPUINFER=${CPUINFER:-15}
DEFER=${DEFER:-0} FAMILY=${FAMILY:-qwen3next} EXTRA=${EXTRA:-}
builds
model=$SYNTH_Q35; [ "$FAMILY" = qwen3moe ] && model=$SYNTH_Q3
synth "$FAMILY" "$model"
tmp=$(mktemp -d)
run() { # run I TAG: build I
  local rc=0
  KT_HYBRID_TIMING=1 timeout 300 "${BUILDS[$1]}" generate --model-path "$model" --input-ids "$PROMPT_IDS" --ignore-eos \
    --device cuda --max-new-tokens "$TOKENS" --kt-weight-path "$model" --kt-method "$METHOD" --kt-cpuinfer "$CPUINFER" \
    --kt-max-deferred-experts-per-token "$DEFER" $EXTRA >"$tmp/out" 2>"$tmp/err" || rc=$?
  local tps
  tps=$(sed -nE 's/.*decode ([0-9.]+) tok\/s.*/\1/p' "$tmp/err" | tail -1)
  echo "$2: decode ${tps:-?} tok/s, ids $(md5sum <"$tmp/out" | cut -c1-8), rc $rc"
  grep -E 'hand-off timing|prediction|rror' "$tmp/err" | cut -c1-300 | sed "s/^/$2:   /" || true
  if [ -n "$tps" ]; then echo "$tps" >>"$tmp/tps.$1"; fi
}
echo "== probe before"; probe "$model"
run 0 warm-up >/dev/null # the first load reads the checkpoint from disk
rm -f "$tmp"/tps.*
for r in $(seq 1 "$ROUNDS"); do
  for i in $(order "$r"); do run "$i" "round $r $(label "$i")"; done
done
echo "== probe after"; probe "$model"
for i in "${!BUILDS[@]}"; do
  echo "median $(label "$i"): $(cat "$tmp/tps.$i" 2>/dev/null | median) tok/s over $ROUNDS rounds ($METHOD, D=$DEFER, $FAMILY)"
done
rm -rf "$tmp"
