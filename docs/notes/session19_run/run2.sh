#!/bin/bash
# Session 19, call 2: the mission's decode figure with this build against session 16's final build (f51ff27, where
# the End-to-end table's 548 / 618 tok/s came from), alternated three times on one host: hybrid decode of the 8-layer
# synthetic Qwen3.5 (AMXINT4, 15 engine threads, greedy, D = 0 and 4; KT_HYBRID_TIMING=1); greedy ids compared.
# Then issue 7's one-token rows, three rounds, both builds.
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
for r in 1 2 3; do
  for b in kt_s16 kt; do
    gen "$b D0 r$r" $b
    gen "$b D4 r$r" $b --kt-max-deferred-experts-per-token 4
  done
done
echo "gen $SECONDS s" | tee -a $L
for b in kt_s16 kt; do
  timeout 150 $D/$b bench --type moe --methods AMXINT4,INT4_KGROUP,AMXINT8,AMXBF16 --tokens 1 --min-time 200ms --rounds 3 2>&1 | grep -v "^#" | sed "s/^/$b: /" | tee -a $L
  echo "$b bench $SECONDS s" | tee -a $L
done
