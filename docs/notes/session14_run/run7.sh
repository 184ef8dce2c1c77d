#!/bin/bash
# session 14 call 7: the sampled pick with a cluster of 16 blocks per row (m_pick16, non-portable cluster size) for
# up to 8 rows. cuda.h's attribute value; TestPick (m_pick16 against the host sampler) and every CUDA test;
# BenchmarkPick (c16 against c8 for 1 and 4 rows); sampled decode (t 0.7, top-p 0.9) of the 8-layer Qwen3.5 wholly on
# the GPU and hybrid, the previous build (kt_prev) alternated.
set -o pipefail
C=$PWD/.carry/s14c7; D=/tmp/b; mkdir -p $D
for f in kt kt_prev cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
CI=$(dirname $(dirname $(which nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)))/include
grep -n "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED" $CI/cuda.h | head -2 | tee -a $L
echo "== tests" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run 'TestPick$|TestKernelSourcesIndex' -test.v 2>&1 | grep -E -- '^\s*--- |^(PASS|FAIL|ok)|panic|identical|could not' | tee -a $L)
(cd backend/cuda && timeout 300 $D/cuda.test -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL)|^(PASS|FAIL|ok)|panic' | tee $D/cuda_tests.txt | grep -v -- '--- PASS' | tee -a $L; echo "passed: $(grep -c -- '--- PASS' $D/cuda_tests.txt)" | tee -a $L)
echo "== BenchmarkPick ($SECONDS s)" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run XXX -test.bench 'Pick' -test.benchtime 100x 2>&1 | grep -E 'Benchmark|FAIL|panic' | awk '{print $1, $(NF-1), $NF}' | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 bin=$2; shift 2
  timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --temperature 0.7 --top-p 0.9 --seed 3 --json "$@" > $D/g.json 2> $D/g.err
  grep -E 'new tokens' $D/g.err | sed "s/^/$tag: /" | tee -a $L; python3 -c "import json,sys,hashlib; print(hashlib.md5(str(json.load(open(sys.argv[1]))[\"output_ids\"]).encode()).hexdigest()[:12])" $D/g.json | sed "s/^/$tag ids+: /" | tee -a $L; }
echo "== sampled decode ($SECONDS s)" | tee -a $L
for r in 1 2 3; do for bin in kt_prev kt; do gen "gpu $bin r$r" $bin; done; done
for r in 1 2; do for bin in kt_prev kt; do gen "hybrid $bin r$r" $bin --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4; done; done
echo "end $SECONDS s" | tee -a $L
