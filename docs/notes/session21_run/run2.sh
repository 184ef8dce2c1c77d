#!/bin/bash
# Session 21, call 2: Config.DecodeInterleave (a ready down item after each of a worker's own gate/up blocks in an owned
# one-token task), off against on in one binary, alternated. (a) the engine alone as the hybrid step drives it (kt bench
# --gap 70us, prefetch right for 0.6 and 1.0 of the experts, owned decode, trace); (b) hybrid decode on the synthetic
# 8-layer Qwen3.5 (AMXINT4, D = 0, 512 tokens, KT_HYBRID_INTERLEAVE=0/1, KT_HYBRID_TIMING=1), ids compared.
set -o pipefail
C=$PWD/.carry/s21b; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== engine tests ($SECONDS s)" | tee -a $L
(cd moe/cpuexperts && timeout 120 $D/cpuexperts.test -test.run 'TestPrefetchOwnedDecode|TestFusedMatchesPhased|TestTraceWork' -test.v 2>&1 | grep -E -- '^--- |^(PASS|FAIL|ok)|panic' | tee -a $L)
B="$D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io --cpuinfer 15 --owned-decode --trace"
for r in 1 2 3; do
  for hit in 0.6 1; do
    for il in 0 1; do
      flag=""; [ $il = 1 ] && flag="--decode-interleave"
      timeout 60 $B --prefetch-hit $hit $flag 2>&1 | grep -vE '^#|^$|^cpu features|^method|^qwen|^decode tasks|sleeps|per-thread' | cut -c1-240 | sed "s/^/r$r hit $hit il $il: /" | tee -a $L
    done
  done
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 il=$2
  KT_HYBRID_INTERLEAVE=$il KT_HYBRID_TIMING=1 timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|^hybrid ' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-240 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then o="0 1"; else o="1 0"; fi
  for il in $o; do gen "il=$il r$r" $il; done
done
echo "end $SECONDS s" | tee -a $L
