#!/bin/bash
# Session 22, call 3: Config.DecodeMissStream (owned one-token tasks: each worker runs its blocks of the prefetched
# experts first while its AVX-512 int kernels prefetch its blocks of the others, the prediction's misses, into L2 as a
# side stream). (a) the engine tests on the AMX host; (b) the engine alone as the hybrid step drives it (kt bench
# --gap 70us --prefetch-hit 0.6 / 1, owned decode, trace), off against on, three rounds, Qwen3.5 and Qwen3-30B
# shapes; (c) hybrid decode on the synthetic 8-layer Qwen3.5 (AMXINT4, D = 0, 512 tokens), KT_HYBRID_MISS_STREAM=0/1
# alternated, six pairs, ids compared.
set -o pipefail
C=$PWD/.carry/s22c; D=/tmp/b; mkdir -p $D
for f in kt cpuexperts.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== engine tests ($SECONDS s)" | tee -a $L
(cd moe/cpuexperts && timeout 120 $D/cpuexperts.test -test.run 'TestPrefetch|TestFusedMatchesPhased|TestTraceWork|TestSubmitRelease|TestMethodsAgainst|TestDeterministic' -test.v 2>&1 | grep -E -- '^--- |^(PASS|FAIL|ok)|panic' | tee -a $L)
echo "== engine ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  for model in qwen3.5-35b-a3b qwen3-30b-a3b; do
    for hit in 0.6 1; do
      for ms in 0 1; do
        [ $model = qwen3-30b-a3b ] && [ $r = 3 ] && continue
        flag=""; [ $ms = 1 ] && flag="--decode-miss-stream"
        timeout 60 $D/kt bench --type moe --model $model --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io --cpuinfer 15 \
          --owned-decode --trace --prefetch-hit $hit $flag 2>&1 | grep -E '^AMXINT4 +1 +[0-9]|^prefetch|^read bandwidth' | cut -c1-240 | sed "s/^/r$r $model hit $hit ms $ms: /" | tee -a $L
      done
    done
  done
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 ms=$2
  KT_HYBRID_MISS_STREAM=$ms KT_HYBRID_TIMING=1 timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|^hybrid  |rror' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-300 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) = 1 ]; then o="0 1"; else o="1 0"; fi
  for ms in $o; do gen "r$r ms=$ms" $ms; done
done
echo "end $SECONDS s" | tee -a $L
