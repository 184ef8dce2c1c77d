#!/bin/bash
# Session 22, call 8: main at the session's end (101fb9c: the engine's counter store and the polling resume, 4 KiB
# prefetch steps, host top-k, the misses streamed) against main at its start (40fe180), and with
# KT_HYBRID_PREDICT=refine: hybrid decode on the synthetic 8-layer Qwen3.5 (AMXINT4, D = 0, 512 tokens), rotated
# six times; kt serve at 4 concurrent requests, s21 and head, twice each.
set -o pipefail
C=$PWD/.carry/s22g; D=/tmp/b; mkdir -p $D
for f in kt kt_s21 qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 bin=$2 pr=$3
  KT_HYBRID_PREDICT=$pr KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|^hybrid  |prediction:|rror' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-400 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
cfgs=("kt_s21 next" "kt next" "kt refine")
for r in 0 1 2 3 4 5; do
  for i in 0 1 2; do
    set -- ${cfgs[$(((i + r) % 3))]}
    gen "r$r $1 $2" $1 $2
  done
done
serve() { local bin=$1 port=$2
  $D/$bin serve --model-path /tmp/q35 --skip-tokenizer-init --max-running-requests 8 --port $port --device cuda --kt-weight-path /tmp/q35 \
    --kt-method AMXINT4 --kt-cpuinfer 15 > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
echo "== serve ($SECONDS s)" | tee -a $L
p=31000
for bin in kt_s21 kt kt kt_s21; do
  p=$((p+1)); serve $bin $p || continue
  timeout 100 $D/kt bench --type serve --base-url http://127.0.0.1:$p --num-prompts 16 --random-input-len 128 --random-output-len 64 \
    --random-range-ratio 1 --max-concurrency 4 --seed 1 2>&1 | grep -E 'Output token throughput|Median TPOT|Successful' | sed "s/^/serve $bin c4: /" | tee -a $L
  kill -INT $SP; wait $SP 2>/dev/null
done
echo "end $SECONDS s" | tee -a $L
