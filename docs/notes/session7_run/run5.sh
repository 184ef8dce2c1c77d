#!/bin/bash
# session 7 call 5 (main at the same engine code as calls 3-4): the qwen3next hybrid tests on the H100; hybrid
# decode of the 8-layer synthetic Qwen3.5-35B-A3B-width checkpoint (AMXINT4, D = 0 and 4) with the read probe;
# the full 5-round tables at the default (16 workers) for both shapes; Qwen3-30B at 4096 tokens with 15 workers.
set -o pipefail
C=$PWD/.carry/s7c5; D=/tmp/b; mkdir -p $D
for f in kt moe.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 120 $D/qwen3next.test -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' 2>&1 | tail -3) | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for d in 0 4 0 4; do echo "== hybrid D=$d ($SECONDS s)" | tee -a $L; timeout 60 $G --kt-max-deferred-experts-per-token $d 2>&1 | grep -iE "tok/s" | cut -c1-300 | tee -a $L; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m ($SECONDS s)" | tee -a $L
  timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "== ratio 15 workers ($SECONDS s)" | tee -a $L
[ $SECONDS -lt 530 ] && timeout 60 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --cpuinfer 15 --json $OUT/ratio_15.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
