#!/bin/bash
# Session 20, call 2 (call 1's host was contended: tasks slept, 65-510 tok/s): (a) host check (the read and tile
# probes, kt bench's one-token AMXINT4 row with the trace after an owned prefetch, twice); (b) the hybrid decode,
# this build against session 16's (f51ff27), six alternated pairs, D = 0, 512 tokens each (load amortized), the
# hybrid task trace kept; (c) issue 7's 4096-token target row.
set -o pipefail
C=$PWD/.carry/s20; D=/tmp/b; mkdir -p $D
for f in kt kt_s16 qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
B="$D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io --cpuinfer 15"
for r in 1 2; do
  timeout 60 $B --prefetch-hit 1 --owned-decode --trace 2>&1 | grep -vE '^#|^$|^cpu features|^method|^qwen' | cut -c1-240 | sed "s/^/r$r hit 1: /" | tee -a $L
done
echo "engine $SECONDS s" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
sync; echo "synth $SECONDS s" | tee -a $L
gen() { local tag=$1 bin=$2; shift 2
  KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off|new tokens|prefetch \(|^hybrid|^  (sleeps|per-thread)' $D/err.txt | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-260 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) = 1 ]; then o="kt_s16 kt"; else o="kt kt_s16"; fi
  for b in $o; do gen "$b D0 r$r" $b; done
done
echo "gen $SECONDS s" | tee -a $L
timeout 150 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
