#!/bin/sh
# Shared-prefix serving on the Qwen3.5 hybrid test fixture (Gated DeltaNet layers: recurrent state, prefix
# reuse only at kept snapshots), kt before the branch points (72f8bca) vs after, prefix cache on in both,
# two rounds alternated. Dev VM, CPU backend. --max-total-tokens 8192: the default (2048 tokens for this
# fixture's 512-token context, 4 slots) leaves the cache 12 pages beside 4 running 448-token prompts.
# Usage: sh docs/notes/session11_run/gsp_hybrid_local.sh OLD_KT NEW_KT
set -eu
OLD=$1 NEW=$2
MODEL=testdata/models/qwen35moe-b
SERVE="--model-path $MODEL --skip-tokenizer-init --log-level warning --max-running-requests 4 --max-total-tokens 8192"
BENCH="--type serve --dataset-name generated-shared-prefix --gsp-num-groups 4 --gsp-prompts-per-group 8
  --gsp-system-prompt-len 384 --gsp-question-len 64 --gsp-output-len 8 --max-concurrency 4 --flush-cache --seed 1"
"$OLD" serve $SERVE --port 30111 & A=$!
"$NEW" serve $SERVE --port 30112 & B=$!
trap 'kill $A $B 2>/dev/null' EXIT
for p in 30111 30112; do
  until curl -sf http://127.0.0.1:$p/health >/dev/null; do sleep 0.2; done
done
for round in 1 2; do
  echo "### round $round: before branch points (72f8bca)"
  "$NEW" bench $BENCH --base-url http://127.0.0.1:30111
  echo "### round $round: after"
  "$NEW" bench $BENCH --base-url http://127.0.0.1:30112
done
