#!/bin/bash
# Session 15, call 2: gate/up in K slabs (engine.c gate_up_rows) on DeepSeek-V3's layer, default (slabs where one
# call's activations exceed 1 MiB) against --amx-slab -1 (whole K), alternated twice; then the engine's AMX tests.
set -x
B=$PWD/.carry/s15
xz -dc $B/kt.xz > /tmp/kt && chmod +x /tmp/kt
xz -dc $B/cpuexperts.test.xz > /tmp/cpuexperts.test && chmod +x /tmp/cpuexperts.test
for i in 1 2; do
  for slab in 0 -1; do
    echo "=== round $i slab $slab"
    timeout 250 /tmp/kt bench --type moe --model deepseek-v3 --methods AMXBF16,AMXINT8 --tokens 4096,16384 --min-time 300ms --phases --amx-slab $slab 2>&1 | grep -v "^#"
  done
done
(cd moe/cpuexperts && timeout 200 /tmp/cpuexperts.test -test.run 'AMXKBlockBitwise|AMXCore|DownKernelRounds|WholeItems|TileProbe' -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)" | head -40)
