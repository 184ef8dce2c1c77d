#!/bin/bash
# session 12 call 8: m_pick finishing a top-p on its gathered candidates when they are at most 1024 (pick_small):
# the GPU pick tests, BenchmarkPick, and batch-1 decode on the 8-layer Qwen3.5 checkpoint with top-p 0.9 and with
# Qwen3's recommended sampling, main before the GPU picks (3dfae45) against this build, alternated.
set -o pipefail
C=$PWD/.carry/s12c8; D=/tmp/b; mkdir -p $D
for f in kt kt_old cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run 'TestPick|TestBackendOps/Pick|TestGraphDecodeStep|TestKernelSourcesIndex' -test.v 2>&1 \
  | grep -E -- '--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|picks identical|picked|logprob|panic' | head -40 | tee -a $L)
echo "== BenchmarkPick ($SECONDS s)" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run XXX -test.bench BenchmarkPick -test.benchtime 200x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
H="--kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
gen() { local bin=$1 name=$2; shift 2
  timeout 90 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 "$@" 2>&1 \
    | grep -iE "tok/s|per token|error" | cut -c1-230 | sed "s/^/$bin q35 $name: /" | tee -a $L; }
ids() { local bin=$1 name=$2; shift 2
  timeout 90 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 128 --json "$@" 2>/dev/null \
    | python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(t['id']) for t in d['output']))" > $D/ids_${bin}_$name.txt; }
echo "== ids: this build vs main before it ($SECONDS s)" | tee -a $L
for cfg in "t1:--temperature 1 --seed 7" "t07p09:--temperature 0.7 --top-p 0.9 --seed 3" "t12p05:--temperature 1.2 --top-p 0.5 --seed 5" "t1p099:--temperature 1 --top-p 0.99 --seed 9"; do
  name=${cfg%%:*}; args=${cfg#*:}
  for bin in kt kt_old; do ids $bin $name $args --experts backend; done
  cmp -s $D/ids_kt_$name.txt $D/ids_kt_old_$name.txt && echo "q35 $name gpu: identical ($(wc -w < $D/ids_kt_$name.txt) ids)" | tee -a $L || echo "q35 $name gpu: DIFFERENT" | tee -a $L
done
echo "== decode speed, alternated ($SECONDS s)" | tee -a $L
gen kt warm --max-new-tokens 4 $H >/dev/null
for r in 1 2; do
  for bin in kt_old kt; do
    gen $bin hyb-qwen --temperature 0.7 --top-k 20 --top-p 0.8 --seed 3 $H
    gen $bin gpu-qwen --temperature 0.7 --top-k 20 --top-p 0.8 --seed 3 --experts backend
    gen $bin hyb-t07p09 --temperature 0.7 --top-p 0.9 --seed 3 $H
    gen $bin gpu-t07p09 --temperature 0.7 --top-p 0.9 --seed 3 --experts backend
  done
done
echo "end $SECONDS s" | tee -a $L
