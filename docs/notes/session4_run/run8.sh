#!/bin/bash
# session 4 call 8: where the hybrid step's remaining time goes (launch time between hand-offs)
set -o pipefail
C=$PWD/.carry/p8; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for i in 1 2; do for dd in 0 4; do echo "== D=$dd"; KT_HYBRID_TIMING=1 timeout 60 $G --kt-max-deferred-experts-per-token $dd 2>&1 | grep -iE "tok/s|timing|Forward" | cut -c1-400; done; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
