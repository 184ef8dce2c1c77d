#!/bin/bash
# Session 20, call 4: the prediction score with deferral (call 3 scored stale ids under D = 4: the picks live in
# the deferral's slots), D = 0 and 4 alternated twice; issue 7's 4096-token target row again.
set -o pipefail
C=$PWD/.carry/s20c; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
sync; echo "synth $SECONDS s" | tee -a $L
gen() { local tag=$1 m=$2; shift 2
  KT_HYBRID_TIMING=1 timeout 100 $D/kt generate --model-path $m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path $m --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off|new tokens|prefetch \(|^prediction|^hybrid' $D/err.txt | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-260 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2; do
  gen "q35 greedy D0 r$r" /tmp/q35
  gen "q35 greedy D4 r$r" /tmp/q35 --kt-max-deferred-experts-per-token 4
done
echo "gen $SECONDS s" | tee -a $L
timeout 150 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
