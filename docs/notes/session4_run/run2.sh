#!/bin/bash
# session 4 call 2: MatMulGroup/AddRMSNorm GPU tests, decode old vs new alternated, ncu of the new step
set -o pipefail
C=$PWD/.carry/p2; D=/tmp/b; mkdir -p $D
for f in kt kt.old cuda.test qwen3next.test cpu.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
echo "== cuda tests $(date +%T)"
(cd backend/cuda; KT_TESTDATA_MODELS=../../testdata/models timeout 240 $D/cuda.test -test.run '^(TestBackendOps|TestModelsMatchTransformers|TestModelGraphDecode|TestChunkedPrefill|TestMixedBatch|TestBackendGraphDecode|TestPrefixCacheModel)$' 2>&1 | grep -E "^(---|ok|PASS|FAIL|panic)|MatMulGroup|AddRMSNorm|worst" | head -60)
echo "== hybrid tests $(date +%T)"
(cd models/qwen3next; KT_TESTDATA_MODELS=../../testdata/models timeout 150 $D/qwen3next.test -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' 2>&1 | grep -E "^(---|ok|PASS|FAIL|panic)" | head -20)
echo "== synth $(date +%T)"
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
for i in 1 2 3; do for k in kt.old kt; do
 G="$D/$k generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 64"
 echo "== $k hybrid $(date +%T)"; timeout 60 $G --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --json > $OUT/h_${k}_$i.json 2> $D/err; grep -iE "tok/s|Forward" $D/err | cut -c1-200
 echo "== $k allgpu"; timeout 60 $G --experts backend --json > $OUT/g_${k}_$i.json 2> $D/err; grep -iE "tok/s|Forward" $D/err | cut -c1-200
done; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
cd $OUT; for i in 1 2 3; do cmp <(python3 -c "import json;print(json.load(open('h_kt.old_$i.json'))['output_ids'])") <(python3 -c "import json;print(json.load(open('h_kt_$i.json'))['output_ids'])") && echo "hybrid ids same $i"; done; rm -f *.json; cd - >/dev/null
echo "== ncu new allgpu $(date +%T)"
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 3 --experts backend --disable-cuda-graph > $OUT/ncu_new.csv 2> $OUT/ncu_new.err; echo rc=$?
echo "== end $(date +%T)"
