#!/bin/bash
# session 14 call 12: the session's end against its start (kt_s13 = main at 7c98f3d), alternated on one host: decode
# wholly on the GPU (8-layer Qwen3.5 greedy, 8-layer Qwen3-30B t = 1), hybrid AMXINT4 D = 0 and 4 with
# KT_HYBRID_TIMING=1, kt serve hybrid at 3 and 12 requests and wholly on the GPU at 1 and 6.
set -o pipefail
C=$PWD/.carry/s14c11; D=/tmp/b; mkdir -p $D
for f in kt kt_s13 qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
H="--kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15"
gen() { local tag=$1 bin=$2 m=$3; shift 3
  timeout 100 $D/$bin generate --model-path $m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 "$@" 2>&1 \
    | grep -E 'hand-off|new tokens' | sed -E 's/, [0-9.]+ ms launching.*//; s/8 prompt tokens in [^,]*, //' | cut -c1-200 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3; do
  for bin in kt_s13 kt; do
    gen "gpu q35 $bin r$r" $bin /tmp/q35
    [ $r -le 2 ] && gen "gpu q3 $bin r$r" $bin /tmp/q3 --temperature 1 --seed 7
    KT_HYBRID_TIMING=1 gen "hybrid D0 $bin r$r" $bin /tmp/q35 $H
    KT_HYBRID_TIMING=1 gen "hybrid D4 $bin r$r" $bin /tmp/q35 $H --kt-max-deferred-experts-per-token 4
  done
done
serve() { local bin=$1 port=$2; shift 2
  $D/$bin serve --model-path /tmp/q35 --skip-tokenizer-init --max-running-requests 16 --port $port "$@" > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
bench() { local tag=$1 port=$2 c=$3
  timeout 120 $D/kt bench --type serve --base-url http://127.0.0.1:$port --num-prompts $((4*c)) --random-input-len 256 --random-output-len 128 \
    --random-range-ratio 1 --max-concurrency $c --seed 1 2>&1 \
    | grep -E 'Output token throughput|Median TPOT' | sed "s/^/$tag c$c: /" | tee -a $L; }
p=30700
for bin in kt_s13 kt; do
  p=$((p+1)); serve $bin $p $H || continue
  for c in 3 12; do bench "serve hybrid $bin" $p $c; done
  kill -INT $SP; wait $SP 2>/dev/null
  p=$((p+1)); serve $bin $p --device cuda || continue
  for c in 1 6; do bench "serve gpu $bin" $p $c; done
  kill -INT $SP; wait $SP 2>/dev/null
done
echo "end $SECONDS s" | tee -a $L
