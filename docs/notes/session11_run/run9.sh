#!/bin/bash
# session 11 call 9 (main at the end of the session): the End-to-end table's hybrid decode rows beside the read probe
# of the same call. 8-layer Qwen3.5-35B-A3B width: greedy (its routing is diverse), D = 0 and 4; 8-layer Qwen3-30B-A3B
# width: sampled at t = 1 (its greedy decode repeats one token), D = 0 and 4; alternated twice, the probe between.
set -o pipefail
C=$PWD/.carry/s11c9; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test qwen3moe.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
probe() { $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L; }
one() { local m=$1 name=$2; shift 2
  KT_HYBRID_TIMING=1 timeout 90 $D/kt generate --model-path /tmp/$m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/$m --kt-cpuinfer 15 --kt-method AMXINT4 "$@" 2>&1 | grep -iE "tok/s|per token|hand-off|error" | cut -c1-260 | sed "s/^/$m $name: /" | tee -a $L; }
# warm the page cache of both checkpoints once (the first load reads them from disk)
one q35 warm --max-new-tokens 4 >/dev/null; one q3 warm --max-new-tokens 4 >/dev/null
probe
for r in 1 2; do
  for d in 0 4; do one q35 greedy-D$d --kt-max-deferred-experts-per-token $d; done
  for d in 0 4; do one q3 t1-D$d --temperature 1 --seed 7 --kt-max-deferred-experts-per-token $d; done
  probe
done
echo "== all on the GPU ($SECONDS s)" | tee -a $L
for m in q35 q3; do timeout 90 $D/kt generate --model-path /tmp/$m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --experts backend 2>&1 | grep -iE "tok/s|error" | cut -c1-200 | sed "s/^/$m allgpu: /" | tee -a $L; done
echo "end $SECONDS s" | tee -a $L
