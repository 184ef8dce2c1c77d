#!/bin/bash
# session 5 call 8 (main 472866c): engine tests on real AMX; the engine table (1..4096 tokens, both shapes)
# against PyTorch; Qwen3-30B repeats; hybrid model tests and hybrid decode with the per-task trace.
set -o pipefail
C=$PWD/.carry/s5c8; D=/tmp/b; mkdir -p $D
for f in kt moe.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
export KT_TESTDATA_MODELS=$PWD/testdata/models
(cd moe/cpuexperts && timeout 300 $D/moe.test -test.run 'TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestTileLayout|TestLoRA|TestAMXEmul|TestSyncHelp|TestHostTask' 2>&1 | tail -3)
(cd models/qwen3next && timeout 300 $D/qwen3next.test -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' 2>&1 | tail -3)
for m in qwen3.5-35b-a3b qwen3-30b-a3b; do echo "== table $m"; timeout 240 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --compare-torch 2>&1 | grep -vE "^\s*$|^#"; done
for i in 1 2 3; do echo "== repeat $i"; timeout 120 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch 2>&1 | grep -E "^AMX|read bandwidth|torch TF"; done
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for d in 0 4; do echo "== hybrid D=$d"; KT_HYBRID_TIMING=1 timeout 60 $G --kt-max-deferred-experts-per-token $d 2>&1 | grep -iE -A3 "tok/s|timing" | cut -c1-400; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
