#!/bin/bash
# session 11 call 7: the sampler change (77c0ed2) end to end. Hybrid decode of the 8-layer synthetic Qwen3.5-35B-A3B
# width checkpoint (AMXINT4, D = 0; its greedy decode routes diversely, call 6), sampled at t=1, at t=0.7 top-p 0.95
# and at t=0.7 top-k 20 top-p 0.8 (Qwen's advice), kt.old (main before the change) and kt alternated twice; and
# BenchmarkSampleTemperature on this CPU.
set -o pipefail
C=$PWD/.carry/s11c7; D=/tmp/b; mkdir -p $D
for f in kt kt.old qwen3next.test sample.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd engine/sample && $D/sample.test -test.run XXX -test.bench 'SampleTemperature' -test.benchtime 300x 2>&1 | grep Bench | tee -a $L)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
G="generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --seed 7"
one() { local b=$1 name=$2; shift 2
  KT_HYBRID_TIMING=1 timeout 90 $D/$b $G "$@" 2>&1 | grep -iE "tok/s|per token|error" | grep -v "hand-off" | cut -c1-200 | sed "s/^/$b $name: /" | tee -a $L; }
for r in 1 2; do
  for b in kt.old kt; do
    one $b greedy
    one $b t1 --temperature 1
    one $b t07p95 --temperature 0.7 --top-p 0.95
    one $b t07k20p08 --temperature 0.7 --top-k 20 --top-p 0.8
  done
done
echo "end $SECONDS s" | tee -a $L
