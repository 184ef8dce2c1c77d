#!/bin/bash
# session 5 call 10: does GPU decode in another process slow the CPU engine's one-token tasks? (call 9's background
# run exited: its log is printed now); the hybrid with KT_HYBRID_WAIT=block vs spin.
set -o pipefail
C=$PWD/.carry/s5c10; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
B="$D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4,AMXINT8 --tokens 1 --min-time 2s --cpuinfer 14 --trace"
GG="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --experts backend --max-new-tokens 20000"
for i in 1 2; do
  echo "== bench alone"; timeout 60 taskset -c 0-14 $B 2>&1 | grep -E "^AMX|read bandwidth" | cut -c1-200
  taskset -c 15 $GG > /tmp/gpu.log 2>&1 & P=$!
  sleep 10; echo "== bench beside all-GPU decode (running: $(kill -0 $P 2>/dev/null && echo yes || echo no))"; timeout 60 taskset -c 0-14 $B 2>&1 | grep -E "^AMX|read bandwidth" | cut -c1-200
  echo "still running after: $(kill -0 $P 2>/dev/null && echo yes || echo no)"; kill $P 2>/dev/null; wait $P 2>/dev/null; tail -3 /tmp/gpu.log | cut -c1-300
done
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
for i in 1 2; do for w in spin block; do echo "== hybrid D=0 wait=$w"; KT_HYBRID_WAIT=$w KT_HYBRID_TIMING=1 timeout 60 $G 2>&1 | grep -iE -A3 "tok/s|timing" | grep -vE "^method|^--|memory:" | cut -c1-330; done; done
