#!/bin/bash
# session 14 call 2: the decode GEMVs ask for their blocks' weight rows in L2 before they wait for the kernel ahead
# (gemv_prefetch; early launch lets them start while it runs). Every CUDA test; BenchmarkGEMV with early launch on /
# off; decode wholly on the GPU: call 1's build (early launch alone, kt_c1) against this one, early launch on and off;
# hybrid AMXINT4 with KT_HYBRID_TIMING=1 (the GPU wait per MoE layer); kt serve wholly on the GPU at 3 and 6 requests.
set -o pipefail
C=$PWD/.carry/s14c2; D=/tmp/b; mkdir -p $D
for f in kt kt_c1 cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== every CUDA test" | tee -a $L
(cd backend/cuda && timeout 300 $D/cuda.test -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL)|^(PASS|FAIL|ok)|panic' | tee $D/cuda_tests.txt | grep -v -- '--- PASS' | tee -a $L; echo "passed: $(grep -c -- '--- PASS' $D/cuda_tests.txt)" | tee -a $L)
echo "== GEMV, early launch on / off ($SECONDS s)" | tee -a $L
for pdl in 1 0 1; do (cd backend/cuda && KT_CUDA_PDL=$pdl timeout 120 $D/cuda.test -test.run XXX -test.bench 'GEMV/' -test.benchtime 300x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/pdl=$pdl /" | tee -a $L); done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 bin=$2; shift 2
  timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 "$@" 2>&1 \
    | grep -E 'tok/s|hand-off' | sed "s/^/$tag: /" | tee -a $L; }
echo "== decode wholly on the GPU ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  KT_CUDA_PDL=0 gen "gpu kt pdl=0 r$r" kt
  KT_CUDA_PDL=1 gen "gpu kt_c1 pdl=1 r$r" kt_c1
  KT_CUDA_PDL=1 gen "gpu kt pdl=1 r$r" kt
done
echo "== hybrid ($SECONDS s)" | tee -a $L
for r in 1 2; do
  for pdl in 0 1; do KT_HYBRID_TIMING=1 KT_CUDA_PDL=$pdl gen "hybrid D0 pdl=$pdl r$r" kt --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4; done
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
echo "== serve wholly on the GPU ($SECONDS s)" | tee -a $L
p=30500
for r in 1 2; do
  for pdl in 0 1; do
    p=$((p+1)); KT_CUDA_PDL=$pdl serve $p --device cuda || continue
    for c in 1 3 6; do bench "serve pdl=$pdl r$r" $p $c; done
    kill -INT $SP; wait $SP 2>/dev/null
  done
done
echo "end $SECONDS s" | tee -a $L
