#!/bin/bash
# session 4 call 6 (final): merged main — GPU tests, hybrid decode old vs new, thread A/B, kt serve + kt bench serve, layerwise prefill
set -o pipefail
C=$PWD/.carry/p6; D=/tmp/b; mkdir -p $D
for f in kt kt.old cuda.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
export KT_TESTDATA_MODELS=$PWD/testdata/models
echo "== cuda tests (all) $(date +%T)"
(cd backend/cuda; timeout 240 $D/cuda.test -test.v > $OUT/cuda_tests.log 2>&1; echo rc=$?; grep -E "^(--- FAIL|FAIL|ok|PASS|panic)" $OUT/cuda_tests.log | head; grep -c "^--- PASS" $OUT/cuda_tests.log)
echo "== qwen3next tests (all) $(date +%T)"
(cd models/qwen3next; timeout 240 $D/qwen3next.test -test.v > $OUT/qwen3next_tests.log 2>&1; echo rc=$?; grep -E "^(--- FAIL|FAIL|PASS|panic)" $OUT/qwen3next_tests.log | head; grep -c "^--- PASS" $OUT/qwen3next_tests.log)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
for i in 1 2 3; do for k in kt.old kt; do
 G="$D/$k generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 128"
 for dd in 0 4; do echo "== $k hybrid D=$dd $(date +%T)"; KT_HYBRID_TIMING=1 timeout 60 $G --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --kt-max-deferred-experts-per-token $dd 2>&1 | grep -iE "tok/s|timing|per token" | cut -c1-330; done
 echo "== $k allgpu"; timeout 60 $G --experts backend 2>&1 | grep -iE "per token" | cut -c1-200
done; $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"; done
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 128 --kt-weight-path /tmp/q35 --kt-method AMXINT4"
for i in 1 2; do for v in "15" "16" "15 help"; do set -- $v; echo "== threads $v"; KT_CPUEXPERTS_SYNC_HELP=$([ -n "$2" ] && echo 1 || echo 0) KT_HYBRID_TIMING=1 timeout 60 $G --kt-cpuinfer $1 2>&1 | grep -iE "tok/s|timing" | cut -c1-300; done; done
for k in kt.old kt; do
 echo "== serve $k $(date +%T)"
 $D/$k serve --model-path /tmp/q35 --skip-tokenizer-init --device cuda --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 --port 30011 > $D/serve_$k.log 2>&1 &
 sp=$!
 for t in $(seq 1 60); do python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:30011/health')" 2>/dev/null && break; sleep 1; done
 for c in 1 4; do timeout 120 $D/kt bench --type serve --base-url http://127.0.0.1:30011 --num-prompts 12 --random-input-len 128 --random-output-len 128 --random-range-ratio 1 --max-concurrency $c 2>&1 | grep -iE "concurrency|throughput|TPOT|TTFT|ITL|Successful" | head -12; done
 kill $sp; wait $sp 2>/dev/null
done
P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range(4096)))")
for th in 0 1024; do echo "== layerwise threshold $th (4096-token prompt) $(date +%T)"; timeout 120 $D/kt generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 4 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --chunked-prefill-size 4096 --kt-gpu-prefill-token-threshold $th 2>&1 | grep -iE "prompt tokens|layerwise" | grep -v "prepare weight" | cut -c1-250; done
echo "== end $(date +%T)"
