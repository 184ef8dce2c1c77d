#!/bin/bash
# session 12 call 9: the final m_pick (one cl_load for every width): the GPU pick tests, BenchmarkPick at batch 1,
# and batch-1 decode on the 8-layer Qwen3.5 checkpoint, sampled (top-p 0.9; Qwen3's settings) and greedy.
set -o pipefail
C=$PWD/.carry/s12c9; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run 'TestPick|TestBackendOps/Pick|TestGraphDecodeStep|TestKernelSourcesIndex' -test.v 2>&1 \
  | grep -E -- '--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|picks identical|picked|logprob|panic' | head -40 | tee -a $L)
echo "== BenchmarkPick ($SECONDS s)" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run XXX -test.bench 'BenchmarkPick/V=151936/B=1/' -test.benchtime 200x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
H="--kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
gen() { local name=$1; shift
  timeout 90 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 "$@" 2>&1 \
    | grep -iE "tok/s|error" | cut -c1-230 | sed "s/^/kt q35 $name: /" | tee -a $L; }
gen hyb-t07p09 --temperature 0.7 --top-p 0.9 --seed 3 $H
gen hyb-qwen --temperature 0.7 --top-k 20 --top-p 0.8 --seed 3 $H
gen hyb-greedy $H
gen gpu-t07p09 --temperature 0.7 --top-p 0.9 --seed 3 --experts backend
echo "end $SECONDS s" | tee -a $L
