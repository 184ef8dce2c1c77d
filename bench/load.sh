#!/usr/bin/env bash
# Soak test of the server and scheduler: kt serve on the tiny bundled
# Qwen3-MoE fixture with a small KV budget (so requests are preempted), then
# kt bench --type load: CLIENTS clients for DURATION, some streams abandoned
# midway; it reports errors, and memory, goroutines, running requests and
# used tokens from /metrics before and after (both must come back to idle).
#
#   bench/load.sh                          # any machine; 30 s warm-up, then 3 min
#   CLIENTS=16 DURATION=30s bench/load.sh
#
# Settings: CLIENTS (64), DURATION (3m), WARMUP (30s), PORT (30222), MODEL
# (testdata/models/qwen3moe-a).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CLIENTS=${CLIENTS:-64} DURATION=${DURATION:-3m} WARMUP=${WARMUP:-30s} PORT=${PORT:-30222}
MODEL=${MODEL:-$ROOT/testdata/models/qwen3moe-a}
need "$KT"
log=$(mktemp)
"$KT" serve --model-path "$MODEL" --skip-tokenizer-init --port "$PORT" --max-running-requests 32 \
  --max-total-tokens 4096 --chunked-prefill-size 256 --enable-mixed-chunk --log-level warning >"$log" 2>&1 &
server=$!
trap 'kill -INT $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.5; done
echo "== warm-up, $CLIENTS clients, $WARMUP"
"$KT" bench --type load --base-url "http://127.0.0.1:$PORT" --clients "$CLIENTS" --duration "$WARMUP"
echo "== $CLIENTS clients, $DURATION"
"$KT" bench --type load --base-url "http://127.0.0.1:$PORT" --clients "$CLIENTS" --duration "$DURATION"
