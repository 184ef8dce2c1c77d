#!/bin/bash
# Session 16, call 7: call 6 again with the final build (prefetch in one-token steps only): kt serve hybrid
# at 3 and 8 concurrent requests (multi-token steps: no prefetch now), KT_HYBRID_PREFETCH
# on and 0, alternated twice; then hybrid greedy decode on/off once more on this host.
set -o pipefail
C=$PWD/.carry/s16; D=/tmp/b; mkdir -p $D
for f in kt_new qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
(cd models/qwen3next && timeout 200 $D/qwen3next.test -test.run 'TestHybridPrefetch|TestHybridMatchesCPU' -test.v 2>&1 \
  | grep -E '^(--- |PASS|FAIL|ok)|prefetch \(|panic' | cut -c1-300 | tee -a $L)
H="--kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15"
serve() { local port=$1; shift
  $D/kt_new serve --model-path /tmp/q35 --skip-tokenizer-init --max-running-requests 16 --port $port $H "$@" > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
bench() { local tag=$1 port=$2 c=$3
  timeout 120 $D/kt_new bench --type serve --base-url http://127.0.0.1:$port --num-prompts $((4*c)) --random-input-len 256 --random-output-len 128 \
    --random-range-ratio 1 --max-concurrency $c --seed 1 2>&1 \
    | grep -E 'Output token throughput|Median TPOT' | sed "s/^/$tag c$c: /" | tee -a $L; }
p=30800
for r in 1 2; do
  for pf in 1 0; do
    p=$((p+1)); KT_HYBRID_PREFETCH=$pf serve $p || continue
    for c in 3 8; do bench "serve prefetch=$pf r$r" $p $c; done
    kill -INT $SP; wait $SP 2>/dev/null
  done
done
gen() { local tag=$1; shift
  timeout 100 $D/kt_new generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 $H "$@" \
    2>&1 >/dev/null | grep -E 'new tokens' | sed -E 's/8 prompt tokens in [^,]*, //' | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2; do for pf in 1 0; do KT_HYBRID_PREFETCH=$pf gen "D0 prefetch=$pf r$r"; done; done
echo "end $SECONDS s" | tee -a $L
