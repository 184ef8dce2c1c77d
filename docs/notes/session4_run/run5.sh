#!/bin/bash
# session 4 call 5: integration preview (lorafix + layerwise + gpukern partial + coordinator) GPU/AMX tests and benchmarks
set -o pipefail
C=$PWD/.carry/p5; D=/tmp/b; mkdir -p $D
for f in kt kt.old cuda.test qwen3next.test moe.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
export KT_TESTDATA_MODELS=$PWD/testdata/models
echo "== cuda tests (all) $(date +%T)"
(cd backend/cuda; timeout 300 $D/cuda.test -test.v 2>&1 > $OUT/cuda_tests.log; echo rc=$?; grep -E "^(--- FAIL|FAIL|ok|PASS|panic)" $OUT/cuda_tests.log | head -20; grep -c "^--- PASS" $OUT/cuda_tests.log)
echo "== qwen3next tests (all) $(date +%T)"
(cd models/qwen3next; timeout 300 $D/qwen3next.test -test.v 2>&1 > $OUT/qwen3next_tests.log; echo rc=$?; grep -E "^(--- FAIL|FAIL|ok|PASS|panic)" $OUT/qwen3next_tests.log | head -20; grep -c "^--- PASS" $OUT/qwen3next_tests.log; grep -E "^--- (PASS|FAIL|SKIP): Test(Layerwise|Dynamic|LoRAEngine|Hybrid)" $OUT/qwen3next_tests.log)
echo "== moe tests (LoRA, methods) $(date +%T)"
(cd moe/cpuexperts; timeout 120 $D/moe.test -test.run 'TestLoRAActivations|TestLoRAAgainstReference|TestMethodsAgainstReference' -test.v 2>&1 | grep -E "^(--- |ok|PASS|FAIL|panic)" | head)
echo "== kernel benchmarks $(date +%T)"
(cd backend/cuda; timeout 120 $D/cuda.test -test.run XXX -test.bench 'LinearDecodeStep|DecodeNormRouter' -test.benchtime 2000x 2>&1 | grep -E "^Bench" | head -20)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
for i in 1 2; do for k in kt.old kt; do
 G="$D/$k generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 128"
 for dd in 0 4; do echo "== $k hybrid D=$dd $(date +%T)"; KT_HYBRID_TIMING=1 timeout 60 $G --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --kt-max-deferred-experts-per-token $dd 2>&1 | grep -iE "tok/s|Forward|timing|per token" | cut -c1-330; done
 echo "== $k allgpu"; timeout 60 $G --experts backend 2>&1 | grep -iE "Forward|per token" | cut -c1-200
done; done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range(4096)))")
for th in 0 1024; do echo "== layerwise threshold $th (4096-token prompt, chunk 4096) $(date +%T)"; timeout 120 $D/kt generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 4 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --chunked-prefill-size 4096 --kt-gpu-prefill-token-threshold $th 2>&1 | grep -iE "prompt tokens|layerwise" | cut -c1-250 | head -6; done
echo "== end $(date +%T)"
