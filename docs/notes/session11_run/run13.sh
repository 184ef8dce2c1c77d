#!/bin/bash
# session 11 call 13 (main at the end of the session): the GPU tests once more (prefix branch points through
# CacheBranch, the hybrid tests), and hybrid sampled decode of the 8-layer Qwen3.5 checkpoint (the hybrid step's
# engine now spins 1.5 ms, set by models/internal/routed): the first MoE layer should run at the others' time.
set -o pipefail
C=$PWD/.carry/s11c13; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
export KT_TESTDATA_MODELS=$PWD/testdata/models
(cd backend/cuda && timeout 300 $D/cuda.test -test.v -test.timeout 290s -test.run 'Prefix' 2>&1 | grep -E "^(--- |FAIL|ok|PASS|panic)|RESULT" | sed 's/^/cuda: /' | tee -a $L)
(cd backend/cuda && timeout 300 $D/cuda.test -test.timeout 290s 2>&1 | tail -2 | sed 's/^/cuda all: /' | tee -a $L)
(cd models/qwen3next && timeout 200 $D/qwen3next.test -test.timeout 190s -test.run '^(TestLayerwisePrefill|TestDynamicExpertUpdate|TestHybrid.*|TestGraphDecodeIdentical)$' 2>&1 | tail -2 | sed 's/^/qwen3next: /' | tee -a $L)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
for r in 1 2 3; do
  KT_HYBRID_TIMING=1 timeout 90 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --temperature 1 --seed 7 2>&1 | grep -iE "tok/s|hand-off" | sed -E 's/.*in the CPU experts/CPU experts/; s/8 prompt tokens.*decode/decode/; s/, finish.*//' | sed "s/^/t1 run $r: /" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
