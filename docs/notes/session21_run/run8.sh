#!/bin/bash
# Session 21, call 8: call 7's served ids differed between ahead and plain hand-offs at 6 concurrent requests. Is
# that the hand-off or the serving's batching (which steps a request shares decides the GEMMs' row counts)? kt serve
# hybrid plain twice and ahead twice, the same 6 requests concurrently and then one at a time; ids compared.
set -o pipefail
C=$PWD/.carry/s21g; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test; do [ -x $D/$f ] || { xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; }; done
L=$OUT/log.txt
[ -d /tmp/q35 ] || KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
serve() { local port=$1; shift
  $D/kt serve --model-path /tmp/q35 --skip-tokenizer-init --max-running-requests 8 --port $port --device cuda --kt-weight-path /tmp/q35 \
    --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/serve_$port.log 2>&1 &
  SP=$!
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && return 0; sleep 0.2; done
  echo "did not come up"; tail -5 $D/serve_$port.log | tee -a $L; return 1; }
ids() { python3 - "$1" "$2" <<'P'
import json, sys, threading, urllib.request
url, conc = "http://127.0.0.1:%s/generate" % sys.argv[1], sys.argv[2] == "1"
out = [None] * 6
def go(i):
    body = json.dumps({"input_ids": [(i * 97 + j * 13) % 1000 + 5 for j in range(20 + 7 * i)],
                       "sampling_params": {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}}).encode()
    r = urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=120)
    out[i] = json.loads(r.read())["output_ids"]
if conc:
    th = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    [t.start() for t in th]; [t.join() for t in th]
else:
    [go(i) for i in range(6)]
print(json.dumps(out))
P
}
p=31100
for run in plain1 ahead1 plain2 ahead2; do
  a=0; [ "${run#ahead}" != "$run" ] && a=1
  p=$((p+1)); KT_HYBRID_AHEAD=$a serve $p || continue
  for conc in 1 0; do
    ids $p $conc > $D/ids.json; echo "$run concurrent=$conc ids $(md5sum < $D/ids.json | cut -c1-8) per request: $(python3 -c "import json,hashlib;print(' '.join(hashlib.md5(json.dumps(x).encode()).hexdigest()[:6] for x in json.load(open('$D/ids.json'))))")" | tee -a $L
  done
  kill -INT $SP; wait $SP 2>/dev/null
done
echo "end $SECONDS s" | tee -a $L
