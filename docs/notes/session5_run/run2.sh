#!/bin/bash
# session 5 call 2: AMX peak rate vs the number of cores running it; engine phases at 4096 tokens;
# the hybrid step's CPU task traced (KT_HYBRID_TIMING=1 turns the engine trace on) beside the standalone trace.
set -o pipefail
C=$PWD/.carry/s5c2; D=/tmp/b; mkdir -p $D
for f in kt moe.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
(KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 > /tmp/synth.log 2>&1; sync) &
SP=$!
$D/moe.test -test.run XXX -test.bench 'AMXKernel/.*/peak-[12]/' -test.benchtime 1x 2>&1 | grep -E "peak|FAIL|panic"
wait $SP; tail -1 /tmp/synth.log
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for i in 1 2; do
  echo "== hybrid D=0"; KT_HYBRID_TIMING=1 timeout 60 $G 2>&1 | grep -iE -A4 "tok/s|timing|decode tasks" | cut -c1-400
  echo "== standalone"; timeout 60 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --trace 2>&1 | tail -7
done
echo "== hybrid D=4"; KT_HYBRID_TIMING=1 timeout 60 $G --kt-max-deferred-experts-per-token 4 2>&1 | grep -iE -A4 "tok/s|timing|decode tasks" | cut -c1-400
for ch in 128 256; do echo "== phases, prefill chunk $ch"; timeout 150 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --prefill-chunk $ch --phases 2>&1 | grep -vE "^\s*$" | tail -7; done
