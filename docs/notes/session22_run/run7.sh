#!/bin/bash
# Session 22, call 7: Config.DecodeMisses (the blocks of experts the prefetch did not read in an owned one-token
# task): owned (expert order, the default), stream (last in their owners' lists, prefetched by the owners' kernels)
# or shared (one list any worker takes once its own, the prefetched experts' blocks, is done). (a) engine tests;
# (b) the engine alone as the hybrid step drives it (kt bench --gap 70us --prefetch-hit 0.6 / 1, owned decode,
# trace), three rounds; (c) hybrid decode on the synthetic 8-layer Qwen3.5 (AMXINT4, D = 0, 512 tokens),
# KT_HYBRID_MISSES rotated six times, ids compared.
set -o pipefail
C=$PWD/.carry/s22f; D=/tmp/b; mkdir -p $D
for f in kt cpuexperts.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== engine tests ($SECONDS s)" | tee -a $L
(cd moe/cpuexperts && timeout 120 $D/cpuexperts.test -test.run 'TestPrefetch|TestFusedMatchesPhased|TestTraceWork|TestSubmitRelease|TestDeterministic' -test.v 2>&1 | grep -E -- '^--- |^(PASS|FAIL|ok)|panic' | tee -a $L)
(cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 100 $D/qwen3next.test -test.run 'TestHybridPrefetch|TestHybridGraphDecode' -test.v > $OUT/qwen3next.txt 2>&1; echo "qwen3next rc=$?" | tee -a $L; grep -E -- '^(--- |FAIL|ok|PASS)|panic' $OUT/qwen3next.txt | tee -a $L)
echo "== engine ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  for hit in 0.6 1; do
    for ms in owned shared stream; do
      timeout 60 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io --cpuinfer 15 \
        --owned-decode --trace --prefetch-hit $hit --decode-misses $ms 2>&1 | grep -E '^AMXINT4 +1 +[0-9]|^prefetch|^read bandwidth' | cut -c1-240 | sed "s/^/r$r hit $hit $ms: /" | tee -a $L
    done
  done
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 ms=$2
  KT_HYBRID_MISSES=$ms KT_HYBRID_TIMING=1 timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|^hybrid  |rror' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-300 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
cfgs=(owned shared stream)
for r in 0 1 2 3 4 5; do
  for i in 0 1 2; do
    ms=${cfgs[$(((i + r) % 3))]}
    gen "r$r $ms" $ms
  done
done
echo "end $SECONDS s" | tee -a $L
