#!/bin/bash
# Session 22, call 2: (a) TestStreamWaitValue (WaitValue and WaitHost) with its kernels loaded before any wait (call 1
# hung in it: the first kernel copy loaded its module while the stream waited on the test's thread); every model test
# of both families with KT_HYBRID_RESUME=poll as the default; (b) hybrid decode on the synthetic 8-layer Qwen3.5
# (AMXINT4, D = 0, 512 tokens), three configurations rotated: kt_s21 (main at the session's start, 40fe180: host store
# after sync, cuStreamWaitValue32, prefetch checks per 32-row block), this build with KT_HYBRID_RESUME=host (only the
# 4 KiB prefetch checks differ) and with the default (poll); (c) kt serve at 4 concurrent requests, poll and host.
set -o pipefail
C=$PWD/.carry/s22b; D=/tmp/b; mkdir -p $D
for f in kt kt_s21 cuda.test qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd backend/cuda && timeout 100 $D/cuda.test -test.run 'TestStreamWaitValue|TestKernelsWait' -test.v > $OUT/cuda.txt 2>&1; echo "cuda rc=$?" | tee -a $L; grep -E -- '^(--- |    --- |FAIL|ok|PASS)|panic|_test.go' $OUT/cuda.txt | head -20 | tee -a $L)
for m in qwen3next qwen3moe; do
  (cd models/$m && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 150 $D/$m.test -test.v -test.timeout 140s > $OUT/$m.txt 2>&1; echo "$m rc=$?" | tee -a $L; grep -E -- '^(--- FAIL|FAIL|ok|PASS)|panic' $OUT/$m.txt | head -10 | tee -a $L; echo "$m passed: $(grep -c -- '^--- PASS' $OUT/$m.txt)" | tee -a $L)
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 bin=$2 res=$3
  KT_HYBRID_RESUME=$res KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|^hybrid  |rror' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-300 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
cfgs=("kt_s21 -" "kt host" "kt poll")
for r in 0 1 2 3 4 5; do
  for i in 0 1 2; do
    set -- ${cfgs[$(((i + r) % 3))]}
    gen "r$r $1 $2" $1 $2
  done
done
serve() { local port=$1; shift
  $D/kt serve --model-path /tmp/q35 --skip-tokenizer-init --max-running-requests 8 --port $port --device cuda --kt-weight-path /tmp/q35 \
    --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
echo "== serve ($SECONDS s)" | tee -a $L
p=31000
for res in poll host poll host; do
  p=$((p+1)); KT_HYBRID_RESUME=$res serve $p || continue
  timeout 100 $D/kt bench --type serve --base-url http://127.0.0.1:$p --num-prompts 16 --random-input-len 128 --random-output-len 64 \
    --random-range-ratio 1 --max-concurrency 4 --seed 1 2>&1 | grep -E 'Output token throughput|Median TPOT|Successful' | sed "s/^/serve $res c4: /" | tee -a $L
  kill -INT $SP; wait $SP 2>/dev/null
done
echo "end $SECONDS s" | tee -a $L
