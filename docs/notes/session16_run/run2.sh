#!/bin/bash
# Session 16, call 2: call 1's prefetch read the predicted experts into whichever core's L2 claimed the chunk, and the
# task did not get faster (a line in another core's L2 costs about a memory access). Now: owned decode blocks
# (each worker first computes the gate/up blocks it owns, and the prefetch reads those on it), and cldemote.
# (1) tests; (2) engine alone, 70 us gap, one token, alternated; (3) hybrid decode owned / shared / off, D = 0 and 4;
# (4) issue 7's Qwen3-30B prefill ratios with this build.
set -o pipefail
C=$PWD/.carry/s16; D=/tmp/b; mkdir -p $D
for f in kt_new qwen3next.test cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
echo "synth $SECONDS s" | tee -a $L
(cd moe/cpuexperts && timeout 120 $D/cpuexperts.test -test.run 'TestPrefetch' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)' | tee -a $L)
(cd models/qwen3next && timeout 240 $D/qwen3next.test -test.run 'TestHybridPrefetch|TestHybridMatchesCPU|TestHybridDeferral' -test.v 2>&1 \
  | grep -E '^(--- |PASS|FAIL|ok)|prefetch \(|panic' | cut -c1-300 | tee -a $L)
echo "tests $SECONDS s" | tee -a $L
for r in 1 2; do
  for a in "-1" "1" "1 --owned-decode" "1 --owned-decode --prefetch-how 1" "0.7 --owned-decode" "1 --prefetch-how 2" "-1 --owned-decode"; do
    timeout 60 $D/kt_new bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io \
      --cpuinfer 15 --prefetch-hit $a 2>&1 | grep -E '^AMXINT4|^prefetch' | cut -c1-100 | sed "s/^/r$r hit $a: /" | tee -a $L
  done
done
echo "bench $SECONDS s" | tee -a $L
H="--kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15"
gen() { local tag=$1; shift
  timeout 100 $D/kt_new generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 $H "$@" 2>&1 \
    | grep -E 'hand-off|new tokens|prefetch \(' | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-300 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3; do
  for p in owned shared 0; do
    KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "D0 $p r$r"
    [ $r -le 2 ] && [ $p != shared ] && KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "D4 $p r$r" --kt-max-deferred-experts-per-token 4
  done
done
echo "gen $SECONDS s" | tee -a $L
timeout 150 $D/kt_new bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
