#!/bin/bash
# session 13 call 4: the hybrid step's CPU experts skip the padding rows of a decode step padded to its graph bucket
# (runbase.Base.RealRows). GPU tests; kt serve hybrid (8-layer Qwen3.5, AMXINT4) at 3, 6 and 12 concurrent greedy
# requests (buckets 4, 8, 16) by this build and main before it (kt_old), alternated.
set -o pipefail
C=$PWD/.carry/s13c4; D=/tmp/b; mkdir -p $D
for f in kt kt_old qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd models/qwen3next && timeout 300 $D/qwen3next.test -test.run 'TestHybridGraphDecode|TestHybridMatchesCPU|TestHybridDeferral' -test.v 2>&1 \
  | grep -E '^(\s*--- |PASS|FAIL|ok|panic)|RESULT|error' | cut -c1-260 | head -40 | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
serve() { local bin=$1 port=$2
  KT_HYBRID_TIMING=1 $D/$bin serve --model-path /tmp/q35 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 --skip-tokenizer-init \
    --max-running-requests 16 --port $port > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
bench() { local tag=$1 port=$2 c=$3
  timeout 120 $D/kt bench --type serve --base-url http://127.0.0.1:$port --num-prompts $((4*c)) --random-input-len 256 --random-output-len 128 \
    --random-range-ratio 1 --max-concurrency $c --seed 1 2>&1 \
    | grep -E 'Output token throughput|Median TPOT' | sed "s/^/$tag c$c: /" | tee -a $L; }
echo "== serve ($SECONDS s)" | tee -a $L
p=30300
for r in 1 2; do
  for bin in kt_old kt; do
    p=$((p+1)); serve $bin $p || continue
    for c in 3 6 12; do bench "$bin r$r" $p $c; done
    kill -INT $SP; wait $SP 2>/dev/null
    grep -E "hybrid step" $D/serve_$p.log | grep -oE "per step [0-9.]+ ms waiting for the GPU pieces|[0-9.]+ ms in the CPU experts" | tr '\n' ' ' | sed "s/^/$bin r$r timing: /" | tee -a $L; echo | tee -a $L
  done
done
echo "end $SECONDS s" | tee -a $L
