#!/bin/bash
# hybridgraph device run (one call): GPU hybrid tests with graphs on, then decode tok/s of the 8-layer synthetic
# Qwen3.5 (hybrid BF16 / AMXINT4 with graphs on and KT_CUDA_GRAPH=0, all-GPU reference) and the CPU read bandwidth.
set -o pipefail
R=$(pwd); B=$R/.carry/hybridgraph
log() { echo "== $(date +%T) $*"; }
log start; nproc; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
log hybrid GPU tests
(cd $R/models/qwen3next && timeout 100 $B/qwen3next.test -test.v -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode)$' > $OUT/tests.txt 2>&1; echo "rc=$?")
grep -E '^(\s*--- |FAIL|ok|PASS)|RESULT|worst|graph stats|decode graphs|panic|Error' $OUT/tests.txt | cut -c1-260 | tail -40
log synth
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 80 $B/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 -test.v 2>&1 | grep -E 'GB|ok|FAIL|PASS' | tail -3
log StreamRead
timeout 20 $B/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream|GB'
G="$B/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos"
run() { log "$@"; timeout 45 $G "$@" 2>&1 | grep -E 'decode|rror|panic' | cut -c1-300; }
H="--device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15"
run $H --kt-method BF16
KT_CUDA_GRAPH=0 run $H --kt-method BF16
run $H --kt-method AMXINT4
KT_CUDA_GRAPH=0 run $H --kt-method AMXINT4
run $H --kt-method BF16
run --device cuda --experts backend
log StreamRead again
timeout 20 $B/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream|GB'
log end
