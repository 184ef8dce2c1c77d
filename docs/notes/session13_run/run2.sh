#!/bin/bash
# session 13 call 2: gate modes — memop (cuStreamWaitValue32), kernel (a one-thread kernel loading the word), 0 (no
# gates) — alternated on the 8-layer Qwen3.5 hybrid decode, greedy D = 0 and 4; the ready wait now pauses between
# loads. GPU tests of both modes first.
set -o pipefail
C=$PWD/.carry/s13c2; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd backend/cuda && timeout 120 $D/cuda.test -test.run 'TestGatedPieces|TestKernelSourcesIndex' -test.v 2>&1 \
  | grep -E '^(\s*--- |PASS|FAIL|ok|panic)|error|gated|ready' | head -40 | tee -a $L)
for m in memop kernel; do
(cd models/qwen3next && KT_CUDA_PIECE_GATES=$m timeout 300 $D/qwen3next.test -test.run 'TestHybridGraphDecode' -test.v 2>&1 \
  | grep -E '^(\s*--- |PASS|FAIL|ok|panic)|error' | cut -c1-300 | sed "s/^/$m: /" | head -30 | tee -a $L)
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
probe() { $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L; }
H="--kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
gen() { local name=$1; shift
  KT_HYBRID_TIMING=1 timeout 90 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 $H "$@" 2>&1 \
    | grep -iE "tok/s|hand-off|error" | cut -c1-330 | sed "s/^/$name: /" | tee -a $L; }
gen warm --max-new-tokens 4 >/dev/null
probe
for r in 1 2 3; do
  for d in 0 4; do
    for m in memop kernel 0; do KT_CUDA_PIECE_GATES=$m gen "$m D$d" --kt-max-deferred-experts-per-token $d; done
  done
  probe
done
echo "end $SECONDS s" | tee -a $L
