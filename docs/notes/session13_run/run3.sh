#!/bin/bash
# session 13 call 3 (exploration): where kt serve's hybrid decode at 16 concurrent requests spends a step. The CPU
# expert engine alone at 1-32 tokens per layer beside the read probe (kt bench --type moe, with and without a gap
# between tasks as the hybrid step leaves one); kt serve hybrid on the 8-layer Qwen3.5 checkpoint under 16
# concurrent greedy requests with KT_HYBRID_TIMING=1 (the hand-off times, logged at shutdown).
set -o pipefail
C=$PWD/.carry/s13c3; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== engine alone ($SECONDS s)" | tee -a $L
timeout 200 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1,2,4,8,16,32 --min-time 200ms --rounds 3 --cpuinfer 15 2>&1 | tail -25 | tee -a $L
timeout 200 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1,16 --min-time 200ms --rounds 3 --cpuinfer 15 --gap 70us 2>&1 | tail -12 | tee -a $L
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
serve() { local port=$1; shift
  KT_HYBRID_TIMING=1 $D/kt serve --model-path /tmp/q35 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 --skip-tokenizer-init \
    --max-running-requests 16 --port $port "$@" > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
bench() { local tag=$1 port=$2; shift 2
  timeout 120 $D/kt bench --type serve --base-url http://127.0.0.1:$port --num-prompts 64 --random-input-len 256 --random-output-len 128 \
    --random-range-ratio 1 --max-concurrency 16 --seed 1 "$@" 2>&1 \
    | grep -E 'Successful|Output token throughput|Mean TPOT|Median TPOT|Mean TTFT|P99 ITL' | sed "s/^/$tag: /" | tee -a $L; }
echo "== serve ($SECONDS s)" | tee -a $L
for p in 30201 30202; do
  serve $p || continue
  bench "greedy $p" $p
  kill -INT $SP; wait $SP 2>/dev/null
  grep -E "hybrid step|decode" $D/serve_$p.log | cut -c1-600 | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
