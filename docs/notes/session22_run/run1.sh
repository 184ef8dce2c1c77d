#!/bin/bash
# Session 22, call 1: (a) the new GPU and engine tests (Stream.WaitHost's polling kernel beside WaitValue,
# Batch.Release); (b) the engine alone as the hybrid step drives it, main before the session (kt_old, 40fe180)
# against this build (owned prefetch checks for a queued task every 4 KiB instead of every 32-row block): sub>pick;
# (c) hybrid decode on the 8-layer synthetic Qwen3.5 (AMXINT4, D = 0, 512 tokens), four configurations rotated:
# kt_old, this build with KT_HYBRID_RESUME=host (session 21's resume: this thread stores the counter after its sync,
# cuStreamWaitValue32), =engine (the engine stores it as the task ends) and =poll (engine store, polling kernel);
# (d) TestHybridGraphDecode and TestHybridPrefetch with the new default.
set -o pipefail
C=$PWD/.carry/s22a; D=/tmp/b; mkdir -p $D
for f in kt kt_old cuda.test cpuexperts.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== unit tests ($SECONDS s)" | tee -a $L
(cd backend/cuda && timeout 60 $D/cuda.test -test.run 'TestStreamWaitValue|TestKernelsWait|TestStreamHostFunc' -test.v 2>&1 | grep -E -- '^(=== RUN|--- |    --- |PASS|FAIL|ok)|panic|rror' | tee -a $L)
(cd moe/cpuexperts && timeout 60 $D/cpuexperts.test -test.run 'TestSubmitRelease|TestPrefetchOwnedDecode|TestFusedMatchesPhased|TestTraceWork' -test.v 2>&1 | grep -E -- '^--- |^(PASS|FAIL|ok)|panic' | tee -a $L)
echo "== engine, one token after a 70 us gap, prefetch right for 0.6 ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  for b in kt_old kt; do
    timeout 60 $D/$b bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io \
      --cpuinfer 15 --owned-decode --trace --prefetch-hit 0.6 2>&1 | grep -vE '^#|^$|^cpu features|^method|^qwen|^decode tasks|per-thread' | cut -c1-240 | sed "s/^/r$r $b: /" | tee -a $L
  done
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 bin=$2 res=$3
  KT_HYBRID_RESUME=$res KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|^hybrid  |RESUME|rror' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-300 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
cfgs=("kt_old -" "kt host" "kt engine" "kt poll")
for r in 0 1 2 3 4; do
  for i in 0 1 2 3; do
    set -- ${cfgs[$(((i + r) % 4))]}
    gen "r$r $1 $2" $1 $2
  done
done
echo "== model tests ($SECONDS s)" | tee -a $L
(cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout $((590 - SECONDS)) $D/qwen3next.test -test.run 'TestHybridGraphDecode|TestHybridPrefetch' -test.v -test.timeout 300s > $OUT/qwen3next.txt 2>&1; echo "rc=$?" | tee -a $L)
grep -E -- '^(--- |    --- |FAIL|ok|PASS)|panic|experts: ' $OUT/qwen3next.txt | cut -c1-300 | tee -a $L
echo "end $SECONDS s" | tee -a $L
