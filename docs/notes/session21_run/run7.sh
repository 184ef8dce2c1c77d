#!/bin/bash
# Session 21, call 7: the ahead hand-off as the default (KT_HYBRID_AHEAD unset; 0 turns it off). Every model test of
# both families on the H100 with it; kt serve hybrid at 4 concurrent requests, ahead and plain (greedy /generate ids
# compared, kt bench --type serve throughput); hybrid decode (512 tokens), three more alternated pairs.
set -o pipefail
C=$PWD/.carry/s21g; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for m in qwen3next qwen3moe; do
  (cd models/$m && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 150 $D/$m.test -test.v -test.timeout 140s > $OUT/$m.txt 2>&1; echo "$m rc=$?" | tee -a $L; grep -E -- '^(--- FAIL|FAIL|ok|PASS)|panic' $OUT/$m.txt | head -10 | tee -a $L; echo "$m passed: $(grep -c -- '^--- PASS' $OUT/$m.txt)" | tee -a $L)
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
serve() { local port=$1; shift
  $D/kt serve --model-path /tmp/q35 --skip-tokenizer-init --max-running-requests 8 --port $port --device cuda --kt-weight-path /tmp/q35 \
    --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
ids() { python3 - "$1" <<'P'
import json, sys, threading, urllib.request
url = "http://127.0.0.1:%s/generate" % sys.argv[1]
out = [None] * 6
def go(i):
    body = json.dumps({"input_ids": [(i * 97 + j * 13) % 1000 + 5 for j in range(20 + 7 * i)],
                       "sampling_params": {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}}).encode()
    r = urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=120)
    out[i] = json.loads(r.read())["output_ids"]
th = [threading.Thread(target=go, args=(i,)) for i in range(6)]
[t.start() for t in th]; [t.join() for t in th]
print(json.dumps(out))
P
}
p=31000
for a in 1 0; do
  p=$((p+1)); KT_HYBRID_AHEAD=$a serve $p || continue
  ids $p > $D/ids_$a.json; echo "serve ahead=$a ids $(md5sum < $D/ids_$a.json | cut -c1-8) ($(head -c 120 $D/ids_$a.json))" | tee -a $L
  grep -m1 -o "piecewise CUDA graphs[^)]*)[^)]*)" $D/serve_$p.log | cut -c1-260 | sed "s/^/serve ahead=$a: /" | tee -a $L
  timeout 100 $D/kt bench --type serve --base-url http://127.0.0.1:$p --num-prompts 16 --random-input-len 128 --random-output-len 64 \
    --random-range-ratio 1 --max-concurrency 4 --seed 1 2>&1 | grep -E 'Output token throughput|Median TPOT|Successful' | sed "s/^/serve ahead=$a c4: /" | tee -a $L
  kill -INT $SP; wait $SP 2>/dev/null
done
gen() { local tag=$1 a=$2
  KT_HYBRID_AHEAD=$a KT_HYBRID_TIMING=1 timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-300 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then o="0 1"; else o="1 0"; fi
  for a in $o; do gen "ahead=$a r$r" $a; done
done
echo "end $SECONDS s" | tee -a $L
