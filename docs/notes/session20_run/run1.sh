#!/bin/bash
# Session 20, call 1: (a) the kernels session 19's review changed (amx_i4f_core, the group-wise decode kernels'
# prefetch) on real AMX, with the new trace test; (b) where a one-token task's gate/up time goes after an owned
# prefetch (the trace's new gu-work / dn-work columns: time inside the blocks against the phase's end), engine alone;
# (c) the hybrid decode, this build against session 16's (f51ff27), alternated four times on one host, D = 0,
# with the hybrid's task trace kept; (d) issue 7's 4096-token target row.
set -o pipefail
C=$PWD/.carry/s20; D=/tmp/b; mkdir -p $D
for f in kt kt_s16 cpuexperts.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|MHz' | tee -a $L
timeout 240 $D/cpuexperts.test -test.run 'AMXInt4Fused|DecodeOneToken|DecodePrefetch|MethodsAgainst|FusedMatches|Determin|TraceWork|AMXKBlock|Int4KGroupAMX' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|panic' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
B="$D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io --cpuinfer 15"
for r in 1 2; do
  for hit in "1 --owned-decode" -1; do
    timeout 60 $B --prefetch-hit $hit --trace 2>&1 | grep -vE '^#|^$|^cpu features|^method|^qwen' | cut -c1-240 | sed "s/^/r$r hit $hit: /" | tee -a $L
  done
done
echo "engine $SECONDS s" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
sync; echo "synth $SECONDS s" | tee -a $L
gen() { local tag=$1 bin=$2; shift 2
  KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off|new tokens|prefetch \(|^hybrid|^  (sleeps|per-thread)' $D/err.txt | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-260 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then o="kt_s16 kt"; else o="kt kt_s16"; fi
  for b in $o; do gen "$b D0 r$r" $b; done
done
echo "gen $SECONDS s" | tee -a $L
timeout 150 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
