#!/bin/bash
# session 6 call 8 (final main): hybrid decode of the 8-layer synthetic Qwen3.5-35B-A3B-width checkpoint, AMXINT4,
# D = 0 and 4, twice each, with the read probe before and after; then Qwen3-30B at 4096 tokens, 5 rounds against
# PyTorch (AMXBF16, AMXINT8) on this host.
set -o pipefail
C=$PWD/.carry/s6c8; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for i in 1 2; do for d in 0 4; do echo "== hybrid D=$d ($SECONDS s)" | tee -a $L; timeout 60 $G --kt-max-deferred-experts-per-token $d 2>&1 | grep -iE "tok/s" | cut -c1-300 | tee -a $L; done; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L
echo "== Qwen3-30B 4096 ($SECONDS s)" | tee -a $L; timeout 150 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
