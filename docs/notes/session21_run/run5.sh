#!/bin/bash
# Session 21, call 5: the hybrid step's ahead hand-off (KT_HYBRID_AHEAD=1: the piece after a hand-off is launched
# before the CPU experts end, its stream waiting for a pinned counter, cuStreamWaitValue32). Its tests on the H100
# (TestStreamWaitValue, the hybrid model tests with it), then hybrid decode on the synthetic 8-layer Qwen3.5 (AMXINT4,
# D = 0, 512 tokens, KT_HYBRID_TIMING=1), KT_HYBRID_AHEAD=0/1 alternated in one binary, ids compared.
set -o pipefail
C=$PWD/.carry/s21e; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd backend/cuda && timeout 100 $D/cuda.test -test.v -test.run 'TestStreamWaitValue|TestStreamsEventsHostFunc' > $OUT/cuda.txt 2>&1; echo "cuda rc=$?" | tee -a $L; grep -E -- '^(--- |ok|PASS|FAIL)|panic|wait_test|_test.go' $OUT/cuda.txt | head -20 | tee -a $L)
(cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 220 $D/qwen3next.test -test.v -test.timeout 210s -test.run '^(TestHybrid.*)$' > $OUT/qwen3next.txt 2>&1; echo "qwen3next rc=$?" | tee -a $L; grep -E -- '^(--- |    --- |ok|PASS|FAIL)|panic' $OUT/qwen3next.txt | head -40 | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 a=$2
  KT_HYBRID_AHEAD=$a KT_HYBRID_TIMING=1 timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|sleeps per task|piecewise CUDA' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-300 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) = 1 ]; then o="0 1"; else o="1 0"; fi
  for a in $o; do gen "ahead=$a r$r" $a; done
done
echo "end $SECONDS s" | tee -a $L
