#!/bin/bash
# session 5 call 3: prefill chunk 128/256/512 alternated (AMXBF16/AMXINT8, Qwen3-30B, 4096 tokens);
# are the expert weights on huge pages in the hybrid step and in kt bench?
set -o pipefail
C=$PWD/.carry/s5c2; D=/tmp/b; mkdir -p $D
for f in kt moe.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag; grep -E "MemFree|AnonHuge" /proc/meminfo
for i in 1 2 3; do for ch in 128 256 512; do echo "== prefill chunk $ch"; timeout 100 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --prefill-chunk $ch --phases 2>&1 | grep -E "^AMX|read bandwidth"; done; done
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
KT_HYBRID_TIMING=1 $G --max-new-tokens 3000 > /tmp/gen.log 2>&1 & P=$!
sleep 12; echo "== hybrid kt generate (pid $P):"; grep -E "Rss|AnonHuge|Anonymous" /proc/$P/smaps_rollup; wait $P; grep -iE -A3 "tok/s|timing" /tmp/gen.log | cut -c1-400
$D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 8s --trace > /tmp/bench.log 2>&1 & P=$!
sleep 10; echo "== kt bench (pid $P):"; grep -E "Rss|AnonHuge|Anonymous" /proc/$P/smaps_rollup; wait $P; tail -6 /tmp/bench.log
