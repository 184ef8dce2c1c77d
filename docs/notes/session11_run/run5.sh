#!/bin/bash
# session 11 call 5: the GPU prefix-cache tests (branch points, TestPrefixBranchModel; TestPrefixCacheModel), then
# hybrid decode of an 8-layer synthetic Qwen3-30B-A3B checkpoint (the End-to-end table's pending row): AMXINT4,
# D = 0 and 4 alternated, KT_HYBRID_TIMING for the per-step split, the read probe before and after, all on the GPU
# for reference.
set -o pipefail
C=$PWD/.carry/s11c5; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3moe.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
export KT_TESTDATA_MODELS=$PWD/testdata/models
(cd backend/cuda && timeout 120 $D/cuda.test -test.v -test.run '^(TestPrefixBranchModel|TestPrefixCacheModel)$' 2>&1 | grep -E "RESULT|^(--- |PASS|FAIL|ok|panic)" | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
du -sh /tmp/q3 | tee -a $L
probe() { $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L; }
probe
G="$D/kt generate --model-path /tmp/q3 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256"
for d in 0 4 0 4; do echo "== hybrid D=$d ($SECONDS s)" | tee -a $L; KT_HYBRID_TIMING=1 timeout 90 $G --kt-weight-path /tmp/q3 --kt-cpuinfer 15 --kt-method AMXINT4 --kt-max-deferred-experts-per-token $d 2>&1 | grep -iE "tok/s|timing|per token|error" | cut -c1-330 | tee -a $L; done
probe
echo "== all on the GPU ($SECONDS s)" | tee -a $L
timeout 90 $G --experts backend 2>&1 | grep -iE "tok/s|per token|error" | cut -c1-250 | tee -a $L
echo "end $SECONDS s" | tee -a $L
