#!/bin/bash
# Session 19, call 5: the one-token decode kernels with four multiply-add chains and the activations flipped once
# per block (kt_new, ce_new.test) against main (kt, ce_old.test: two chains, a flip per line). Call 4's trace put
# the gate/up of a one-token task at ~45 us even with 97 % of its blocks prefetched into the owners' caches.
# (a) tests on this CPU; (b) BenchmarkDecodeKernel (the kernels alone at one token, resident 512 KiB or streamed),
# both builds alternated twice; (c) the engine with the hybrid's gap and an owned prefetch, traced, alternated three
# times; (d) hybrid decode, D = 0, alternated three times.
set -o pipefail
C=$PWD/.carry/s19; D=/tmp/b; mkdir -p $D
for f in kt kt_new ce_new.test ce_old.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 200 $D/ce_new.test -test.run 'DecodeOneTokenMatchesPair|DecodePrefetchBitwise|MethodsAgainstReference|FusedMatchesPhased|DeterministicAcrossThreadCounts|Prefetch' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|panic' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
for r in 1 2; do
  for b in ce_old ce_new; do
    timeout 120 $D/$b.test -test.run XXX -test.bench DecodeKernel -test.benchtime 1x 2>&1 | grep Benchmark | sed "s/^/r$r $b: /" | tee -a $L
  done
done
echo "kbench $SECONDS s" | tee -a $L
for r in 1 2 3; do
  for b in kt kt_new; do
    timeout 60 $D/$b bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4,AMXINT8,INT4_KGROUP --tokens 1 --min-time 300ms --gap 70us --f32-io \
      --cpuinfer 15 --prefetch-hit 1 --owned-decode --trace 2>&1 | grep -E '^(AMXINT|INT4)|^read|^prefetch' | cut -c1-200 | sed "s/^/r$r $b: /" | tee -a $L
  done
done
echo "engine $SECONDS s" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
sync; echo "synth $SECONDS s" | tee -a $L
gen() { local tag=$1 bin=$2; shift 2
  KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off|new tokens' $D/err.txt | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-260 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3; do
  for b in kt kt_new; do gen "r$r $b D0" $b; done
done
echo "end $SECONDS s" | tee -a $L
