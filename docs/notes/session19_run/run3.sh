#!/bin/bash
# Session 19, call 3: is call 2's hybrid slowdown (this build's CPU experts 1.09-1.16 ms per step against session 16's
# 0.88-1.01, session 16's build always first in each pair) the build or the order? Hybrid D = 0 in pairs of both
# orders and pairs of one build; then the engine alone with the hybrid's 70 us gap and an owned prefetch of the right
# experts (session 16's emulation), both builds alternated in both orders.
set -o pipefail
C=$PWD/.carry/s19; D=/tmp/b; mkdir -p $D
for f in kt kt_s16 qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
sync; echo "synth $SECONDS s" | tee -a $L
gen() { local tag=$1 bin=$2; shift 2
  KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off|new tokens|prefetch \(' $D/err.txt | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-260 | sed "s/^/$tag: /" | tee -a $L; }
p=0
for pair in "kt kt_s16" "kt_s16 kt" "kt kt" "kt_s16 kt_s16" "kt kt_s16" "kt_s16 kt"; do
  p=$((p+1))
  for b in $pair; do gen "pair$p $b D0" $b; done
done
echo "gen $SECONDS s" | tee -a $L
for r in 1 2; do
  for b in kt kt_s16 kt_s16 kt; do
    timeout 60 $D/$b bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io \
      --cpuinfer 15 --prefetch-hit 1 --owned-decode 2>&1 | grep -E '^AMXINT4|^prefetch|^read' | cut -c1-120 | sed "s/^/r$r $b: /" | tee -a $L
  done
done
echo "end $SECONDS s" | tee -a $L
