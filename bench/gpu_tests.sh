#!/usr/bin/env bash
# Runs the tests that need the GPU machine (they skip elsewhere): every test of
# the CUDA backend (ops against the CPU backend, all transformers fixtures
# wholly on the GPU: TestModelsMatchTransformers, TestChunkedPrefill,
# TestMixedBatch, decode graphs, FP8, the pick), of the model families (the
# hybrid step against the CPU: TestHybridMatchesCPU, TestHybridGraphDecode,
# TestHybridDeferral, TestHybridPrefetch, TestLayerwisePrefill, LoRA on the
# GPU; DeepSeek-V3's TestHybridMatchesCPU, TestHybridGraphDecode), of hybrid/, of the CPU expert engine on a CPU with AMX, and of the kt
# commands. Each binary runs in its package directory with KT_TESTDATA_MODELS
# pointing at the repository's fixtures.
#
#   bench/build.sh && bench/gpu_tests.sh              # on the GPU machine
#   PKGS="cuda qwen3next" RUN='Hybrid' bench/gpu_tests.sh
#
# Prints each package's failures and pass/skip counts; exits 1 if any failed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export KT_TESTDATA_MODELS=${KT_TESTDATA_MODELS:-$ROOT/testdata/models}
PKGS=${PKGS:-cuda qwen3next qwen3moe deepseekv3 hybrid cpuexperts kt}
RUN=${RUN:-.}
TIMEOUT=${TIMEOUT:-20m}
OUTDIR=${OUTDIR:-$(mktemp -d)}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)

dir_of() {
  case $1 in
    cuda) echo backend/cuda ;;
    qwen3next | qwen3moe | deepseekv3) echo "arch/$1" ;;
    hybrid) echo hybrid ;;
    cpuexperts) echo moe/cpuexperts ;;
    kt) echo cmd/kt ;;
    *) echo "unknown package $1" >&2; return 1 ;;
  esac
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi: GPU tests will skip"
failed=0
for p in $PKGS; do
  bin=$BIN/$p.test
  need "$bin"
  dir=$(dir_of "$p")
  log=$OUTDIR/$p.txt
  echo "== $dir ($p.test -test.run '$RUN'), log $log"
  rc=0
  (cd "$ROOT/$dir" && "$bin" -test.run "$RUN" -test.v -test.timeout "$TIMEOUT" >"$log" 2>&1) || rc=$?
  grep -E -- '^--- FAIL|^FAIL|^panic' "$log" | head -20 || true
  echo "$p: rc=$rc, passed $(grep -c -- '^--- PASS' "$log" || true), skipped $(grep -c -- '^--- SKIP' "$log" || true)"
  [ "$rc" = 0 ] || failed=1
done
exit $failed
