#!/bin/bash
set -o pipefail
C=$PWD/.carry/p3; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test cpu.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
[ -d /tmp/q35 ] || KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 128 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for i in 1 2; do for dd in 0 4; do echo "== D=$dd $(date +%T)"; KT_HYBRID_TIMING=1 timeout 60 $G --kt-max-deferred-experts-per-token $dd 2>&1 | grep -iE "tok/s|Forward|timing" | cut -c1-400; done; done
for t in 14 16; do echo "== cpuinfer $t"; KT_HYBRID_TIMING=1 timeout 60 ${G/--kt-cpuinfer 15/--kt-cpuinfer $t} 2>&1 | grep -iE "tok/s|timing" | cut -c1-400; done
echo "== bench moe 1 token"; timeout 60 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms 2>&1 | grep -E "^(AMX|read)" | cut -c1-200
echo "== end $(date +%T)"
