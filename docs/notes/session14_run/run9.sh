#!/bin/bash
# session 14 call 9: the hybrid hand-off through one small kernel each way (Device.KernelCopy into / out of the
# pinned buffers' device addresses) instead of four copy-engine transfers per MoE layer. TestKernelCopy and every CUDA
# test; the qwen3next hybrid GPU tests with the kernel copies (default) and with KT_HYBRID_COPY=memcpy; hybrid decode
# of the 8-layer Qwen3.5 (AMXINT4, 15 threads, D = 0 and 4, KT_HYBRID_TIMING=1), kernel and memcpy alternated; kt serve
# hybrid at 3 and 12 requests, both forms.
set -o pipefail
C=$PWD/.carry/s14c9; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== tests" | tee -a $L
(cd backend/cuda && timeout 300 $D/cuda.test -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL)|^(PASS|FAIL|ok)|panic' | tee $D/cuda_tests.txt | grep -v -- '--- PASS' | tee -a $L; echo "passed: $(grep -c -- '--- PASS' $D/cuda_tests.txt); TestKernelCopy: $(grep -c -- '--- PASS: TestKernelCopy ' $D/cuda_tests.txt)" | tee -a $L)
for m in kernel memcpy; do
(cd models/qwen3next && KT_HYBRID_COPY=$m timeout 300 $D/qwen3next.test -test.run 'Hybrid|GPU|Graph|Layerwise' -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|panic|worst' | cut -c1-200 | sed "s/^/$m: /" | tee -a $L)
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
H="--kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15"
gen() { local tag=$1; shift
  timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --json "$@" > $D/g.json 2> $D/g.err
  grep -E 'hand-off|new tokens' $D/g.err | cut -c1-260 | sed "s/^/$tag: /" | tee -a $L
  python3 -c "import json,sys,hashlib; d=json.load(open(sys.argv[1])); print(hashlib.md5(str(d['output_ids']).encode()).hexdigest()[:12], round(d['decode_tokens_per_second'],1))" $D/g.json | sed "s/^/$tag ids tok\/s: /" | tee -a $L; }
echo "== hybrid decode ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  for m in memcpy kernel; do
    KT_HYBRID_TIMING=1 KT_HYBRID_COPY=$m gen "D0 $m r$r" $H
    KT_HYBRID_TIMING=1 KT_HYBRID_COPY=$m gen "D4 $m r$r" $H --kt-max-deferred-experts-per-token 4
  done
done
serve() { local port=$1; shift
  $D/kt serve --model-path /tmp/q35 --skip-tokenizer-init --max-running-requests 16 --port $port "$@" > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
bench() { local tag=$1 port=$2 c=$3
  timeout 120 $D/kt bench --type serve --base-url http://127.0.0.1:$port --num-prompts $((4*c)) --random-input-len 256 --random-output-len 128 \
    --random-range-ratio 1 --max-concurrency $c --seed 1 2>&1 \
    | grep -E 'Output token throughput|Median TPOT' | sed "s/^/$tag c$c: /" | tee -a $L; }
echo "== serve hybrid ($SECONDS s)" | tee -a $L
p=30600
for m in memcpy kernel; do
  p=$((p+1)); KT_HYBRID_COPY=$m serve $p $H || continue
  for c in 3 12; do bench "serve $m" $p $c; done
  kill -INT $SP; wait $SP 2>/dev/null
done
echo "end $SECONDS s" | tee -a $L
