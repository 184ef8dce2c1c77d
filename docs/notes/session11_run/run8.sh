#!/bin/bash
# session 11 call 8: the final sampler (849d900) end to end, as call 7: hybrid decode of the 8-layer synthetic
# Qwen3.5 checkpoint (AMXINT4, D = 0) greedy and sampled (t=1; t=0.7 top-p 0.95; t=0.7 top-k 20 top-p 0.8), kt.old
# (main before the sampler work) and kt alternated twice; BenchmarkSampleTemperature on this CPU. Then the 8-layer
# Qwen3-30B-A3B checkpoint sampled at t=1 (its greedy decode repeats one token, call 6), D = 0 and 4 alternated twice.
set -o pipefail
C=$PWD/.carry/s11c8; D=/tmp/b; mkdir -p $D
for f in kt kt.old qwen3next.test qwen3moe.test sample.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd engine/sample && $D/sample.test -test.run XXX -test.bench 'SampleTemperature' -test.benchtime 300x 2>&1 | grep Bench | tee -a $L)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
one() { local b=$1 m=$2 name=$3; shift 3
  KT_HYBRID_TIMING=1 timeout 90 $D/$b generate --model-path /tmp/$m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/$m --kt-cpuinfer 15 --kt-method AMXINT4 --seed 7 "$@" 2>&1 | grep -iE "tok/s|per token|hand-off|error" | cut -c1-260 | sed "s/^/$b $m $name: /" | tee -a $L; }
for r in 1 2; do
  for b in kt.old kt; do
    one $b q35 greedy
    one $b q35 t1 --temperature 1
    one $b q35 t07p95 --temperature 0.7 --top-p 0.95
    one $b q35 t07k20p08 --temperature 0.7 --top-k 20 --top-p 0.8
  done
done
for r in 1 2; do for d in 0 4; do one kt q3 t1-D$d --temperature 1 --kt-max-deferred-experts-per-token $d; done; done
echo "end $SECONDS s" | tee -a $L
