#!/bin/bash
# session 4 call 4: GPU tests of main (MatMulGroup, AddRMSNorm, GreedyPick), decode old vs new alternated
set -o pipefail
C=$PWD/.carry/p4; D=/tmp/b; mkdir -p $D
for f in kt kt.old cuda.test qwen3next.test cpu.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
echo "== cuda tests $(date +%T)"
(cd backend/cuda; KT_TESTDATA_MODELS=../../testdata/models timeout 240 $D/cuda.test -test.v -test.run '^(TestBackendOps|TestModelsMatchTransformers|TestModelGraphDecode|TestChunkedPrefill|TestMixedBatch|TestBackendGraphDecode|TestPrefixCacheModel)$' 2>&1 | grep -E "^(--- |ok|PASS|FAIL|panic)|^    --- (FAIL|PASS): TestBackendOps/(MatMulGroup|AddRMSNorm|GreedyPick)" | head -40)
echo "== hybrid tests $(date +%T)"
(cd models/qwen3next; KT_TESTDATA_MODELS=../../testdata/models timeout 150 $D/qwen3next.test -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' 2>&1 | grep -E "^(---|ok|PASS|FAIL|panic)" | head -20)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
for i in 1 2; do for k in kt.old kt; do
 G="$D/$k generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 128"
 for dd in 0 4; do echo "== $k hybrid D=$dd $(date +%T)"; KT_HYBRID_TIMING=1 timeout 60 $G --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --kt-max-deferred-experts-per-token $dd --json > $OUT/h_${k}_${dd}_$i.json 2> $D/err; grep -iE "tok/s|Forward|timing|per token" $D/err | cut -c1-330; done
 echo "== $k allgpu"; timeout 60 $G --experts backend --json > $OUT/g_${k}_$i.json 2> $D/err; grep -iE "tok/s|Forward|per token" $D/err | cut -c1-200
done; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
cd $OUT
for f in h_kt_0_1 h_kt_4_1 g_kt_1; do python3 -c "
import json,sys
a=json.load(open('$f.json'));b=json.load(open('${f/kt/kt.old}.json'))
print('$f', 'ids same' if a['output_ids']==b['output_ids'] else 'IDS DIFFER', list(a.keys())[:8])
"; done
tar czf res.tgz *.json; rm -f *.json
echo "== end $(date +%T)"
