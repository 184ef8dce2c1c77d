#!/bin/bash
# session 12 call 7: m_pick finishing a top-k of at most 1024 tokens on a gathered list (pick_small): the GPU pick
# tests, BenchmarkPick, and batch-1 decode on the 8-layer Qwen3.5 checkpoint with Qwen3's recommended sampling
# (t 0.7, top-k 20, top-p 0.8), main before the GPU picks (3dfae45) against this build, alternated.
set -o pipefail
C=$PWD/.carry/s12c7; D=/tmp/b; mkdir -p $D
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
echo "== decode speed, alternated ($SECONDS s)" | tee -a $L
gen kt warm --max-new-tokens 4 $H >/dev/null
for r in 1 2; do
  for bin in kt_old kt; do
    gen $bin hyb-qwen --temperature 0.7 --top-k 20 --top-p 0.8 --seed 3 $H
    gen $bin gpu-qwen --temperature 0.7 --top-k 20 --top-p 0.8 --seed 3 --experts backend
    gen $bin hyb-greedy $H
  done
done
echo "end $SECONDS s" | tee -a $L
