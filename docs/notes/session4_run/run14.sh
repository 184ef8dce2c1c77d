#!/bin/bash
# session 4 call 14: do the engine threads' yields during the GPU pieces cost the CPU half? KT_CPUEXPERTS_SPIN_PURE A/B
set -o pipefail
C=$PWD/.carry/p14; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for i in 1 2 3; do for sp in 30us 400us; do echo "== spin-pure $sp"; KT_CPUEXPERTS_SPIN_PURE=$sp KT_HYBRID_TIMING=1 timeout 60 $G 2>&1 | grep -iE "tok/s|timing" | cut -c1-330; done; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
