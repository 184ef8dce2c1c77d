#!/bin/bash
# session 12 call 5: m_pick on a thread-block cluster of 8 SMs per row (sm_90): the GPU pick tests, BenchmarkPick,
# the ids against main before the GPU picks (3dfae45) and decode speed alternated, on the 8-layer synthetic
# checkpoints.
set -o pipefail
C=$PWD/.carry/s12c5; D=/tmp/b; mkdir -p $D
for f in kt kt_old cuda.test qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run 'TestPick|TestBackendOps/Pick|TestGraphDecodeStep' -test.v 2>&1 \
  | grep -E -- '--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|picks identical|picked|logprob|panic' | head -40 | tee -a $L)
echo "== BenchmarkPick ($SECONDS s)" | tee -a $L
(cd backend/cuda && timeout 150 $D/cuda.test -test.run XXX -test.bench BenchmarkPick -test.benchtime 200x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
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
    for bin in kt kt_old; do ids $bin $m ${name} $args --experts backend; done
    python3 - $D/ids_kt_${m}_${name}.txt $D/ids_kt_old_${m}_${name}.txt <<'PY' | sed "s/^/$m $name gpu: /" | tee -a $L
import sys
a, b = (open(f).read().split() for f in sys.argv[1:3])
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f"{len(a)} and {len(b)} ids; " + ("identical" if n is None and len(a) == len(b) else f"first difference at {n}"))
PY
  done
done
echo "== decode speed, alternated ($SECONDS s)" | tee -a $L
gen kt q35 warm --max-new-tokens 4 ${H//MM/q35} >/dev/null
for r in 1 2; do
  for bin in kt_old kt; do
    gen $bin q3 hyb-t1 --temperature 1 --seed 7 ${H//MM/q3}
    gen $bin q35 hyb-t07p09 --temperature 0.7 --top-p 0.9 --seed 3 ${H//MM/q35}
    gen $bin q35 hyb-t07k50 --temperature 0.7 --top-k 50 --seed 3 ${H//MM/q35}
    gen $bin q35 hyb-greedy ${H//MM/q35}
    gen $bin q35 gpu-t07p09 --temperature 0.7 --top-p 0.9 --seed 3 --experts backend
  done
done
echo "end $SECONDS s" | tee -a $L
