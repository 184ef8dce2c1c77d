#!/bin/bash
# session 13 call 9: padding rows routed nowhere (backend.Step.Live; RouterTopK writes ids -1 from it on), for the GPU
# MoE op and the CPU expert engine alike. GPU tests; kt serve hybrid and wholly on the GPU (8-layer Qwen3.5) at 3, 6
# and 12 concurrent greedy requests, this build against main before the session (kt_old), alternated.
set -o pipefail
C=$PWD/.carry/s13c9; D=/tmp/b; mkdir -p $D
for f in kt kt_old cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd backend/cuda && timeout 200 $D/cuda.test -test.run 'TestBackendOps/RouterTopK|TestRouterTopKReg|TestGraphDecodeStep|TestModelGraphDecode|TestBackendGraphDecode' -test.v 2>&1 \
  | grep -E '^(\s*--- |PASS|FAIL|ok|panic)|RESULT' | cut -c1-220 | head -40 | tee -a $L)
(cd models/qwen3next && timeout 300 $D/qwen3next.test -test.run 'TestHybridGraphDecode|TestHybridMatchesCPU|TestHybridDeferral' -test.v 2>&1 \
  | grep -E '^(\s*--- |PASS|FAIL|ok|panic)|RESULT' | cut -c1-240 | head -40 | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
serve() { local bin=$1 port=$2; shift 2
  $D/$bin serve --model-path /tmp/q35 --skip-tokenizer-init --max-running-requests 16 --port $port "$@" > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
bench() { local tag=$1 port=$2 c=$3
  timeout 120 $D/kt bench --type serve --base-url http://127.0.0.1:$port --num-prompts $((4*c)) --random-input-len 256 --random-output-len 128 \
    --random-range-ratio 1 --max-concurrency $c --seed 1 2>&1 \
    | grep -E 'Output token throughput|Median TPOT' | sed "s/^/$tag c$c: /" | tee -a $L; }
echo "== serve ($SECONDS s)" | tee -a $L
p=30400
for r in 1 2; do
  for bin in kt_old kt; do
    p=$((p+1)); serve $bin $p --device cuda || continue
    for c in 3 6; do bench "$bin gpu r$r" $p $c; done
    kill -INT $SP; wait $SP 2>/dev/null
  done
done
for bin in kt_old kt; do
  p=$((p+1)); serve $bin $p --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 || continue
  for c in 3 6 12; do bench "$bin hybrid" $p $c; done
  kill -INT $SP; wait $SP 2>/dev/null
done
echo "end $SECONDS s" | tee -a $L
