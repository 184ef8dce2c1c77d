#!/bin/bash
# coordinator final run 2: the Qwen3.5 engine table without anything else running (run 1 wrote the synthetic
# checkpoint during it), then hybrid AMXINT4 decode with and without the graph, alternated three times.
set -o pipefail
R=$(pwd); D=/tmp/fin; mkdir -p $D
for f in .carry/final/*.gz; do b=$(basename $f .gz); gunzip -c $f > $D/$b; chmod +x $D/$b; done
log() { echo "== $(date +%T) $*"; }
log kt bench qwen3.5
timeout 100 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4096 --min-time 200ms --compare-torch 2>&1 | cut -c1-200
log synth
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 90 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 -test.v 2>&1 | grep -E 'GB|FAIL' | tail -2
timeout 20 $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream'
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos"
run() { log "$@"; timeout 45 $G "$@" 2>&1 | grep -E 'decode|rror|panic' | grep -v 'routed experts' | cut -c1-200; }
H="--device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for i in 1 2 3; do run $H; KT_CUDA_GRAPH=0 run $H; done
timeout 20 $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream'
log end
