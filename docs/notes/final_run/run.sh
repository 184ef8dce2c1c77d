#!/bin/bash
# coordinator final device run: AMX engine tests, the issue-7 kt bench table for both shapes, then decode
# tok/s of the 8-layer synthetic Qwen3.5 (hybrid AMXINT4/BF16 with the graph, without, all-GPU, all-CPU)
# beside the CPU read-bandwidth probe, all with one binary.
set -o pipefail
R=$(pwd); D=/tmp/fin; mkdir -p $D
for f in .carry/final/*.gz; do b=$(basename $f .gz); gunzip -c $f > $D/$b; chmod +x $D/$b; done
log() { echo "== $(date +%T) $*"; }
log start; nproc; nvidia-smi --query-gpu=name --format=csv,noheader
log engine tests
timeout 60 $D/moe.test -test.run 'TestFused|TestMethodsAgainst|TestDetermin|TestHostTask|TestTileLayout|TestAMXKBlock' -test.count=1 -test.v 2>&1 | grep -E '^(--- |ok|PASS|FAIL)' | tail -12
log synth
(KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 90 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 -test.v 2>&1 | grep -E 'GB|FAIL' | tail -2) &
SYN=$!
log kt bench moe table
timeout 150 $D/kt bench --type moe --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4096 --min-time 200ms --compare-torch --json $OUT/moe.json 2>&1 | tee $OUT/moe.txt | cut -c1-200
wait $SYN
log StreamRead
timeout 20 $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream'
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos"
run() { log "$@"; timeout 45 $G "$@" 2>&1 | grep -E 'decode|rror|panic' | cut -c1-300; }
H="--device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15"
run $H --kt-method AMXINT4
run $H --kt-method BF16
KT_CUDA_GRAPH=0 run $H --kt-method AMXINT4
KT_CUDA_GRAPH=0 run $H --kt-method BF16
run $H --kt-method AMXINT4
run $H --kt-method BF16
run --device cuda --experts backend
run --device cpu --kt-method AMXINT4 --kt-cpuinfer 16
log StreamRead again
timeout 20 $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream'
log end
