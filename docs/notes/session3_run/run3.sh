#!/bin/bash
# coordinator session 3, final: engine table with the best-of PyTorch baseline, Qwen3-30B 4096 repeats, hybrid decode
set -o pipefail
C=.carry/coord5; D=/tmp/b; mkdir -p $D
for f in qwen3next.test cpu.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
cp $C/kt $D/kt; chmod +x $D/kt
echo "== table $(date +%T)"
timeout 200 $D/kt bench --type moe --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4096 --min-time 200ms --compare-torch 2>&1 | grep -vE '^#' | cut -c1-200
echo "== 30b 4096 reps $(date +%T)"
for i in 1 2 3; do timeout 50 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch 2>&1 | grep -E '^(AMX|read|torch)' | cut -c1-200; done
echo "== synth $(date +%T)"
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 120 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
for i in 1 2 3; do for d in 0 4; do echo "== generate D=$d $(date +%T)"; timeout 40 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --kt-max-deferred-experts-per-token $d 2>&1 | grep -iE "tok/s|Forward|host" | cut -c1-200; done; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
echo "== end $(date +%T)"
