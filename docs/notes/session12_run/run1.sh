#!/bin/bash
# session 12 call 1: sampled picks on the GPU (m_pick). GPU tests; then the synthetic 8-layer checkpoints decoded
# sampled by this build (the pick on the GPU) and by main before it (3dfae45: the logits row read back, the host
# sampler): the same ids where the draws agree, and decode tok/s alternated.
set -o pipefail
C=$PWD/.carry/s12c1; D=/tmp/b; mkdir -p $D
for f in kt kt_old cuda.test qwen3next.test qwen3moe.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run 'TestPick|TestBackendOps|TestGraphDecodeStep|TestKernelSourcesIndex' -test.v 2>&1 \
  | grep -E '^(--- |PASS|FAIL|ok|panic)|picks identical|picked|logprob|m_pick|error' | head -60 | tee -a $L)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
probe() { $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L; }
H="--kt-weight-path /tmp/MM --kt-cpuinfer 15 --kt-method AMXINT4"
gen() { local bin=$1 m=$2 name=$3; shift 3
  KT_HYBRID_TIMING=1 timeout 90 $D/$bin generate --model-path /tmp/$m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 "$@" 2>&1 \
    | grep -iE "tok/s|per token|error" | cut -c1-230 | sed "s/^/$bin $m $name: /" | tee -a $L; }
ids() { local bin=$1 m=$2 name=$3; shift 3
  timeout 90 $D/$bin generate --model-path /tmp/$m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 128 --json "$@" 2>/dev/null \
    | python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(t['id']) for t in d['output']))" > $D/ids_${bin}_${m}_$name.txt; }
echo "== ids: this build vs main before it ($SECONDS s)" | tee -a $L
for m in q3 q35; do
  for cfg in "t1:--temperature 1 --seed 7" "t07p09:--temperature 0.7 --top-p 0.9 --seed 3" "t12p05:--temperature 1.2 --top-p 0.5 --seed 5"; do
    name=${cfg%%:*}; args=${cfg#*:}
    for bin in kt kt_old; do ids $bin $m ${name}_gpu $args --experts backend; ids $bin $m ${name}_hyb $args ${H//MM/$m}; done
    for v in gpu hyb; do
      python3 - $D/ids_kt_${m}_${name}_$v.txt $D/ids_kt_old_${m}_${name}_$v.txt <<'PY' | sed "s/^/$m $name $v: /" | tee -a $L
import sys
a, b = (open(f).read().split() for f in sys.argv[1:3])
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f"{len(a)} and {len(b)} ids; " + ("identical" if n is None and len(a) == len(b) else f"first difference at {n}: {a[n] if n is not None else '-'} vs {b[n] if n is not None else '-'}"))
PY
    done
  done
done
echo "== decode speed, alternated ($SECONDS s)" | tee -a $L
gen kt q3 warm --max-new-tokens 4 ${H//MM/q3} >/dev/null; gen kt q35 warm --max-new-tokens 4 ${H//MM/q35} >/dev/null
probe
for r in 1 2; do
  for bin in kt_old kt; do
    gen $bin q3 hyb-t1 --temperature 1 --seed 7 ${H//MM/q3}
    gen $bin q35 hyb-t07p09 --temperature 0.7 --top-p 0.9 --seed 3 ${H//MM/q35}
    gen $bin q35 hyb-greedy ${H//MM/q35}
    gen $bin q3 gpu-t1 --temperature 1 --seed 7 --experts backend
  done
  probe
done
echo "end $SECONDS s" | tee -a $L
