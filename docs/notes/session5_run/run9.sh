#!/bin/bash
# session 5 call 9: does GPU decode in another process slow the CPU engine's one-token tasks?
# kt bench (14 workers) alone vs beside an all-GPU kt generate (its own core), alternated; then the hybrid at 14 and 15 workers.
set -o pipefail
C=$PWD/.carry/s5c9; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
B="$D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4,AMXINT8 --tokens 1 --min-time 2s --cpuinfer 14 --trace"
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --kt-weight-path /tmp/q35"
for i in 1 2; do
  echo "== bench alone"; timeout 60 taskset -c 0-14 $B 2>&1 | grep -E "^AMX|read bandwidth" | cut -c1-200
  taskset -c 15 $G --experts backend --max-new-tokens 30000 > /tmp/gpu.log 2>&1 & P=$!
  sleep 9; echo "== bench beside all-GPU decode"; timeout 60 taskset -c 0-14 $B 2>&1 | grep -E "^AMX|read bandwidth" | cut -c1-200
  kill $P; wait $P 2>/dev/null; grep -E "tok/s" /tmp/gpu.log | tail -1
done
for th in 14 15; do echo "== hybrid D=0 cpuinfer $th"; KT_HYBRID_TIMING=1 timeout 60 $G --max-new-tokens 256 --kt-cpuinfer $th --kt-method AMXINT4 2>&1 | grep -iE -A3 "tok/s|timing" | cut -c1-330; done
