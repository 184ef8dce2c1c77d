#!/bin/sh
# Shared-prefix serving benchmark, prefix cache on vs off, same run.
# Usage: sh docs/notes/gsp_run.sh [path/to/kt]   (default: go build -o /tmp/kt ./cmd/kt)
set -eu
KT=${1:-/tmp/kt}
[ -x "$KT" ] || go build -o "$KT" ./cmd/kt
MODEL=testdata/models/qwen3moe-b
SERVE="--model-path $MODEL --skip-tokenizer-init --log-level warning --max-running-requests 4"
BENCH="--type serve --dataset-name generated-shared-prefix --gsp-num-groups 4 --gsp-prompts-per-group 8
  --gsp-system-prompt-len 384 --gsp-question-len 64 --gsp-output-len 8 --max-concurrency 4 --flush-cache --seed 1"
"$KT" serve $SERVE --port 30101 & ON=$!
"$KT" serve $SERVE --port 30102 --disable-radix-cache & OFF=$!
trap 'kill $ON $OFF 2>/dev/null' EXIT
for p in 30101 30102; do
  until curl -sf http://127.0.0.1:$p/health >/dev/null; do sleep 0.2; done
done
for round in 1 2; do
  echo "### round $round: cache on"
  "$KT" bench $BENCH --base-url http://127.0.0.1:30101
  echo "### round $round: cache off (--disable-radix-cache)"
  "$KT" bench $BENCH --base-url http://127.0.0.1:30102
done
