#!/bin/bash
# session 13 call 6 (exploration): why the hybrid step's CPU experts take ~135 µs per layer at 1 token when the
# engine alone takes ~116 µs with the same gap between tasks. The engine alone with bf16 and with f32 activations
# (--f32-io: the hybrid hands over pinned f32 rows), traced, alternated; the hybrid decode with its full trace.
set -o pipefail
C=$PWD/.carry/s13c6; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 > $D/synth.log 2>&1; sync) &
SY=$!
alone() { local tag=$1; shift
  timeout 120 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --rounds 3 --cpuinfer 15 --gap 70us --trace "$@" 2>&1 \
    | grep -E "^AMXINT4|read bandwidth|sleeps|per-thread" | sed "s/^/$tag: /" | tee -a $L; }
alone warm-bf16 >/dev/null
for r in 1 2; do alone "bf16 r$r"; alone "f32 r$r" --f32-io; done
wait $SY; tail -1 $D/synth.log | tee -a $L
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-method AMXINT4"
for r in 1 2; do
  for c in 15 14; do
    KT_HYBRID_TIMING=1 timeout 90 $G --kt-cpuinfer $c 2>&1 | grep -E "hand-off timing|^hybrid |sleeps|per-thread|tok/s" | cut -c1-330 | sed "s/^/hybrid c$c r$r: /" | tee -a $L
  done
done
echo "end $SECONDS s" | tee -a $L
