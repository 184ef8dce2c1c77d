#!/usr/bin/env bash
# Builds what the bench scripts run, into BIN (default bin/ at the repository
# root): the kt command and the test binaries of the packages whose tests and
# benchmarks need the GPU machine. Run it where Go and gcc are installed (the
# GPU machine has no network, so build elsewhere and copy bin/ over if it lacks
# the Go toolchain or the module cache).
#
#   bench/build.sh            # kt and every test binary
#   BIN=/tmp/b bench/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
mkdir -p "$BIN"
export CGO_ENABLED=1
echo "== kt -> $BIN/kt"
go build -o "$BIN/kt" ./cmd/kt
# package directory : binary name
for p in backend/cuda:cuda backend/cpu:cpu arch/qwen3next:qwen3next arch/qwen3moe:qwen3moe arch/deepseekv3:deepseekv3 \
  hybrid:hybrid moe/cpuexperts:cpuexperts cmd/kt:kt; do
  dir=${p%%:*} name=${p##*:}
  echo "== ./$dir -> $BIN/$name.test"
  go test -c -o "$BIN/$name.test" "./$dir"
done
