#!/usr/bin/env bash
# Serving throughput at fixed concurrency: starts kt serve, runs kt bench
# --type serve against it (as python -m sglang.bench_serving --dataset-name
# random: 4 requests per concurrent client, prompts of 256 random token ids,
# 128 output tokens each, greedy, seed 1) for each concurrency in CONCURRENCY,
# stops the server with SIGINT, and prints output throughput and TPOT.
#
#   bench/build.sh && bench/serve.sh                            # hybrid, GPU machine
#   MODE=gpu CONCURRENCY="1 6" bench/serve.sh                   # whole model on the GPU
#   MODE=cpu MODEL=testdata/models/qwen3moe-a CONCURRENCY=16 NUM_PROMPTS=200 \
#     OUTPUT_LEN=64 RANGE_RATIO=0.5 bench/serve.sh              # the HTTP path alone, any machine
#   KT_A=bin/kt_main KT_B=bin/kt bench/serve.sh                 # two builds, alternated
#
# Settings: MODE (hybrid: routed experts on the CPU expert engine with
# METHOD/CPUINFER, the rest on the GPU; gpu; cpu), MODEL (default: the
# synthetic 8-layer Qwen3.5-35B-A3B-width checkpoint, written if missing),
# CONCURRENCY ("3 6 12"), NUM_PROMPTS (default 4 x concurrency), INPUT_LEN
# (256), OUTPUT_LEN (128), RANGE_RATIO (1: every length exact), EXTRA_BODY (a
# JSON object merged into each request, e.g. '{"temperature":0.7,"top_p":0.9}'),
# ROUNDS (1), PORT (31000).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
MODE=${MODE:-hybrid} CONCURRENCY=${CONCURRENCY:-3 6 12} INPUT_LEN=${INPUT_LEN:-256} OUTPUT_LEN=${OUTPUT_LEN:-128}
RANGE_RATIO=${RANGE_RATIO:-1} METHOD=${METHOD:-AMXINT4} CPUINFER=${CPUINFER:-15} ROUNDS=${ROUNDS:-1}
PORT=${PORT:-31000} EXTRA_BODY=${EXTRA_BODY:-}
builds
if [ -z "${MODEL:-}" ]; then MODEL=$SYNTH_Q35; synth qwen3next "$MODEL"; fi
case $MODE in
  hybrid) flags=(--device cuda --kt-weight-path "$MODEL" --kt-method "$METHOD" --kt-cpuinfer "$CPUINFER") ;;
  gpu) flags=(--device cuda) ;;
  cpu) flags=(--device cpu) ;;
  *) echo "MODE must be hybrid, gpu or cpu" >&2; exit 1 ;;
esac
tmp=$(mktemp -d)
server=
stop() { if [ -n "$server" ]; then kill -INT "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=; fi; }
trap 'stop; rm -rf "$tmp"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for i in $(order "$r"); do
    PORT=$((PORT + 1))
    "${BUILDS[$i]}" serve --model-path "$MODEL" --skip-tokenizer-init --max-running-requests 16 --port "$PORT" \
      --log-level warning "${flags[@]}" >"$tmp/serve.log" 2>&1 &
    server=$!
    up=0
    for _ in $(seq 1 600); do
      if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then up=1; break; fi
      sleep 0.5
    done
    if [ $up = 0 ]; then echo "server did not come up:"; tail -5 "$tmp/serve.log"; stop; continue; fi
    for c in $CONCURRENCY; do
      body=(); [ -n "$EXTRA_BODY" ] && body=(--extra-request-body "$EXTRA_BODY")
      "${BUILDS[0]}" bench --type serve --base-url "http://127.0.0.1:$PORT" --num-prompts "${NUM_PROMPTS:-$((4 * c))}" \
        --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" --random-range-ratio "$RANGE_RATIO" \
        --max-concurrency "$c" --seed 1 "${body[@]}" 2>&1 |
        grep -E 'Successful requests|Output token throughput|Median TTFT|Median TPOT' |
        sed "s/^/round $r $(label "$i") $MODE c=$c: /" || true
    done
    stop
  done
done
