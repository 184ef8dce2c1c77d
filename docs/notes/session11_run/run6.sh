#!/bin/bash
# session 11 call 6: do the synthetic checkpoints' greedy decodes route to the same experts every step (so the CPU
# experts read from the 300 MB L3, not DRAM)? Per checkpoint (8-layer Qwen3-30B-A3B and Qwen3.5-35B-A3B width),
# hybrid AMXINT4 D = 0, greedy vs sampled (temperature 1, seed 7), alternated twice: distinct output ids, the CPU
# experts' time per step (KT_HYBRID_TIMING) and tok/s; the read probe between.
set -o pipefail
C=$PWD/.carry/s11c6; D=/tmp/b; mkdir -p $D
for f in kt qwen3moe.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
[ -d /tmp/q3 ] || KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
[ -d /tmp/q35 ] || KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
sync
probe() { $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L; }
one() { # ckpt mode extra...
  local m=$1 mode=$2; shift 2
  KT_HYBRID_TIMING=1 timeout 90 $D/kt generate --model-path /tmp/$m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/$m --kt-cpuinfer 15 --kt-method AMXINT4 --json "$@" > $D/out.json 2> $D/err.txt
  python3 -c "
import json;d=json.load(open('$D/out.json'));ids=d['output_ids'];n=len(ids)
print('$m $mode: %d ids, %d distinct, last 8 %s, decode %.1f tok/s'%(n,len(set(ids)),ids[-8:],n/d['decode_seconds']))" 2>&1 | tee -a $L
  grep -iE "timing|error" $D/err.txt | cut -c1-300 | sed "s/^/$m $mode: /" | tee -a $L
}
probe
for m in q3 q35; do
  for r in 1 2; do one $m greedy; one $m sampled --temperature 1 --seed 7; done
  probe
done
echo "end $SECONDS s" | tee -a $L
