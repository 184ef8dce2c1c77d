#!/bin/bash
# Session 16, call 3: call 2's owned decode blocks took each item by a claim flag (15 workers CASing one line) and
# ran 20-30 % slower than counter order when nothing was prefetched; now per-worker item lists with a cursor each,
# stolen in turn. The hybrid's prediction moved off the GPU's critical path: made while the CPU computes the MoE
# layer before (residual after its attention + shared expert), read right after that layer's task (the first MoE
# layer predicts at its start). (1) tests; (2) engine alone, 70 us gap; (3) hybrid decode Qwen3.5 and Qwen3-30B
# synthetic checkpoints, prefetch owned / shared / off, same greedy ids.
set -o pipefail
C=$PWD/.carry/s16; D=/tmp/b; mkdir -p $D
for f in kt_new qwen3next.test qwen3moe.test cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
echo "synth $SECONDS s" | tee -a $L
(cd moe/cpuexperts && timeout 120 $D/cpuexperts.test -test.run 'TestPrefetch|TestDeterministic' -test.v 2>&1 | grep -E '^(--- |PASS|FAIL|ok)' | tee -a $L)
(cd models/qwen3next && timeout 240 $D/qwen3next.test -test.run 'TestHybridPrefetch|TestHybridMatchesCPU|TestHybridDeferral|TestHybridGraphDecode' -test.v 2>&1 \
  | grep -E '^(--- |PASS|FAIL|ok)|prefetch \(|panic' | cut -c1-300 | tee -a $L)
echo "tests $SECONDS s" | tee -a $L
for r in 1 2; do
  for a in "-1" "-1 --owned-decode" "1 --owned-decode" "0.7 --owned-decode" "0.5 --owned-decode"; do
    timeout 60 $D/kt_new bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io \
      --cpuinfer 15 --prefetch-hit $a 2>&1 | grep -E '^AMXINT4|^prefetch' | cut -c1-100 | sed "s/^/r$r hit $a: /" | tee -a $L
  done
done
echo "bench $SECONDS s" | tee -a $L
gen() { local tag=$1 m=$2; shift 2
  timeout 100 $D/kt_new generate --model-path $m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 \
    --kt-weight-path $m --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/out.txt 2>&1
  grep -vE 'hand-off|new tokens|prefetch \(|routed experts|load|graph|tok/s|^\s*$' $D/out.txt | md5sum | cut -c1-8 | sed "s/^/$tag ids /" | tee -a $L
  grep -E 'hand-off|new tokens|prefetch \(' $D/out.txt | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-300 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3; do
  for p in owned shared 0; do
    KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "q35 D0 $p r$r" /tmp/q35
    [ $r -le 2 ] && [ $p != shared ] && KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "q35 D4 $p r$r" /tmp/q35 --kt-max-deferred-experts-per-token 4
    [ $r -le 2 ] && [ $p != shared ] && KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "q3 D0 $p r$r" /tmp/q3
  done
done
echo "end $SECONDS s" | tee -a $L
