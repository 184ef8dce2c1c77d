#!/bin/bash
# Session 16, call 1: the next-layer expert prefetch. (1) its tests on the AMX machine and the H100 (engine
# TestPrefetch; qwen3next hybrid tests with it on by default); (2) the engine alone with a 70 us gap between
# one-token tasks, as the hybrid step's GPU piece leaves: no prefetch against a prefetch of the next task's
# experts, all right (hit 1) or 70 % right, by loads or prefetcht1 hints, alternated; (3) hybrid decode of the
# 8-layer synthetic Qwen3.5 (AMXINT4, 15 threads) with the prefetch and without (KT_HYBRID_PREFETCH=0),
# D = 0 and 4, alternated.
set -o pipefail
C=$PWD/.carry/s16; D=/tmp/b; mkdir -p $D
for f in kt_new qwen3next.test cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
echo "synth $SECONDS s" | tee -a $L
(cd moe/cpuexperts && timeout 120 $D/cpuexperts.test -test.run 'TestPrefetch' 2>&1 | tail -3 | tee -a $L)
(cd models/qwen3next && timeout 240 $D/qwen3next.test -test.run 'TestHybridPrefetch|TestHybridMatchesCPU|TestHybridDeferral|TestHybridGraphDecode' -test.v 2>&1 \
  | grep -E '^(--- |PASS|FAIL|ok)|prefetch \(|panic' | cut -c1-300 | tee -a $L)
echo "tests $SECONDS s" | tee -a $L
for r in 1 2; do
  for a in "-1" "1" "0.7" "1 --prefetch-hints" "0.7 --prefetch-hints"; do
    timeout 60 $D/kt_new bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1,4 --min-time 300ms --gap 70us --f32-io \
      --cpuinfer 15 --prefetch-hit $a 2>&1 | grep -E '^AMXINT4|^prefetch|^read' | cut -c1-120 | sed "s/^/r$r hit $a: /" | tee -a $L
  done
done
echo "bench $SECONDS s" | tee -a $L
H="--kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15"
gen() { local tag=$1; shift
  timeout 100 $D/kt_new generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 $H "$@" 2>&1 \
    | grep -E 'hand-off|new tokens|prefetch \(' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-330 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3; do
  for p in 1 0; do
    KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "D0 prefetch=$p r$r"
    [ $r -le 2 ] && KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "D4 prefetch=$p r$r" --kt-max-deferred-experts-per-token 4
  done
done
echo "end $SECONDS s" | tee -a $L
