#!/bin/bash
# coordinator run 3: why the hybrid graph form is slower than op by op: engine threads 15/14/12 with the graph,
# alternated with op by op (KT_CUDA_GRAPH=0), same binary (graph form on by default in it).
set -o pipefail
D=/tmp/fin; mkdir -p $D
for f in .carry/final/kt.gz .carry/final/qwen3next.test.gz; do b=$(basename $f .gz); gunzip -c $f > $D/$b; chmod +x $D/$b; done
log() { echo "== $(date +%T) $*"; }
[ -f /tmp/q35/config.json ] || KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 90 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 -test.v 2>&1 | grep -E 'GB|FAIL' | tail -2
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos"
run() { log "$@"; timeout 45 $G "$@" 2>&1 | grep -E 'decode' | grep -v 'routed experts' | cut -c1-160; }
H="--device cuda --kt-weight-path /tmp/q35 --kt-method AMXINT4"
for i in 1 2; do
  for t in 15 14 12; do run $H --kt-cpuinfer $t; done
  KT_CUDA_GRAPH=0 run $H --kt-cpuinfer 15
  KT_CUDA_GRAPH=0 run $H --kt-cpuinfer 14
done
log end
