#!/bin/bash
# Session 19, call 6: owned down items (kt_od: Config.OwnedDown, on by default with OwnedDecode): in a one-token
# task after an owned prefetch each worker asks for its own down items' weights into L2 while it runs its gate/up
# blocks (call 4's trace: gate/up ~45 us from the caches with the memory idle, then down ~35 us from memory).
# (a) tests; (b) the engine alone with the hybrid's gap, owned prefetch of the right experts (hit 1) and of 70 %,
# --owned-down 0 (on) against -1, alternated three times, traced; (c) hybrid decode, KT_HYBRID_OWNED_DOWN=1 against 0,
# D = 0 and 4, alternated three times.
set -o pipefail
C=$PWD/.carry/s19; D=/tmp/b; mkdir -p $D
for f in kt_od ce_od.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 200 $D/ce_od.test -test.run 'PrefetchOwnedDecode|DecodeOneTokenMatchesPair|MethodsAgainstReference|FusedMatchesPhased|DeterministicAcrossThreadCounts|SyncAfterLonePrefetch' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|panic' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
for r in 1 2 3; do
  for hit in 1 0.7; do
    for od in 0 -1; do
      timeout 60 $D/kt_od bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4,INT4_KGROUP,AMXINT8 --tokens 1 --min-time 300ms --gap 70us --f32-io \
        --cpuinfer 15 --prefetch-hit $hit --owned-decode --owned-down $od --trace 2>&1 | grep -E '^(AMXINT|INT4)|^read' | cut -c1-200 | sed "s/^/r$r hit$hit od$od: /" | tee -a $L
    done
  done
done
echo "engine $SECONDS s" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
sync; echo "synth $SECONDS s" | tee -a $L
gen() { local tag=$1; shift 1
  KT_HYBRID_TIMING=1 timeout 100 $D/kt_od generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off|new tokens' $D/err.txt | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-260 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3; do
  for od in 1 0; do
    KT_HYBRID_OWNED_DOWN=$od gen "r$r od$od D0"
    KT_HYBRID_OWNED_DOWN=$od gen "r$r od$od D4" --kt-max-deferred-experts-per-token 4
  done
done
echo "end $SECONDS s" | tee -a $L
