#!/usr/bin/env bash
# The Go benchmarks that need no GPU and no checkpoint, run with go test on
# any machine: the tokenizer (4 MiB of generated multilingual text, one core),
# the sampler over a 151,936-token vocabulary, the safetensors header parse
# and the adapter conversion. No baseline runs beside them (Hugging Face
# tokenizers and the Python conversion script need Python); on a shared
# machine run with -count 5 and read the spread.
#
#   bench/go_benchmarks.sh
#   COUNT=5 PKGS=./tokenizer bench/go_benchmarks.sh
#
# Settings: PKGS ("./tokenizer ./engine/sample ./safetensors ./adapter/ktconvert"), COUNT (1).
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=${PKGS:-./tokenizer ./engine/sample ./safetensors ./adapter/ktconvert}
COUNT=${COUNT:-1}
for p in $PKGS; do
  echo "== $p"
  case $p in
    ./tokenizer) go test -run '^$' -bench . -benchtime 5x -cpu 1 -count "$COUNT" "$p" ;;
    ./engine/sample) go test -run '^$' -bench Sample -benchtime 2s -count "$COUNT" "$p" ;;
    ./safetensors) go test -run '^$' -bench Open -benchtime 20x -count "$COUNT" "$p" ;;
    ./adapter/ktconvert) go test -run '^$' -bench Convert -benchtime 10x -count "$COUNT" "$p" ;;
    *) go test -run '^$' -bench . -count "$COUNT" "$p" ;;
  esac
done
