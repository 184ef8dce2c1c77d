#!/bin/bash
# hybrid AMXINT4 decode: graph form (KT_HYBRID_GRAPH=1) with the driver's default wait vs KT_CUDA_SCHED=blocking|yield, alternated with op by op.
set -o pipefail
D=/tmp/s; mkdir -p $D
for f in .carry/sched/*.gz; do b=$(basename $f .gz); gunzip -c $f > $D/$b; chmod +x $D/$b; done
[ -f /tmp/q35/config.json ] || KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 90 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 -test.v 2>&1 | grep -E 'GB|FAIL' | tail -1
G="--kt-method AMXINT4"; K="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15"
run() { echo "== $*"; env "$@" $K $G 2>&1 | grep -E 'decode' | grep -v 'routed experts' | cut -c1-150; }
for i in 1 2; do
  run KT_HYBRID_GRAPH=0 ; run KT_HYBRID_GRAPH=1 ; run KT_HYBRID_GRAPH=1 KT_CUDA_SCHED=blocking ; run KT_HYBRID_GRAPH=1 KT_CUDA_SCHED=yield ; run KT_HYBRID_GRAPH=0 KT_CUDA_SCHED=blocking
done
