#!/bin/bash
# session 12 call 6: the final m_pick (a cluster of 8 SMs per row for up to 16 rows, m_pick_rows beyond): the GPU
# pick tests (both kernels), BenchmarkPick, and kt serve hybrid on the 8-layer Qwen3.5 checkpoint under 16 concurrent
# sampled (t 0.7, top-p 0.9) and greedy requests, main before the GPU picks (3dfae45) against this build, alternated.
set -o pipefail
C=$PWD/.carry/s12c6; D=/tmp/b; mkdir -p $D
for f in kt kt_old cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run 'TestPick|TestBackendOps/Pick|TestGraphDecodeStep|TestKernelSourcesIndex|TestCheck' -test.v 2>&1 \
  | grep -E -- '--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|picks identical|picked|logprob|panic' | head -40 | tee -a $L)
echo "== BenchmarkPick ($SECONDS s)" | tee -a $L
(cd backend/cuda && timeout 150 $D/cuda.test -test.run XXX -test.bench BenchmarkPick -test.benchtime 200x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
serve() { local bin=$1 port=$2
  $D/$bin serve --model-path /tmp/q35 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 --skip-tokenizer-init \
    --max-running-requests 16 --port $port --log-level warning > $D/serve_$bin.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "$bin did not come up"; tail -5 $D/serve_$bin.log | tee -a $L; return 1; }
bench() { local tag=$1; shift
  timeout 120 $D/kt bench --type serve --base-url http://127.0.0.1:$PORT --num-prompts 64 --random-input-len 256 --random-output-len 128 \
    --random-range-ratio 1 --max-concurrency 16 --seed 1 "$@" 2>&1 \
    | grep -E 'Successful|Output token throughput|Mean TPOT|Median TPOT|Mean TTFT|P99 ITL' | sed "s/^/$tag: /" | tee -a $L; }
echo "== serve, hybrid q35 ($SECONDS s)" | tee -a $L
for r in 1 2; do
  for bin in kt_old kt; do
    PORT=$((30100 + r)); serve $bin $PORT || continue
    bench "$bin r$r sampled" --extra-request-body '{"temperature":0.7,"top_p":0.9}'
    bench "$bin r$r greedy"
    kill $SP; wait $SP 2>/dev/null
  done
done
echo "end $SECONDS s" | tee -a $L
