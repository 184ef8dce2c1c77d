#!/bin/bash
# Session 15, call 6: the final build's tests on the AMX machine (moe/cpuexperts whole, models/internal/routed,
# cmd/kt quant and moe bench tests), then Kimi K2's layer (384 experts, 7168 x 2048, top-8) at 1 and 4096 tokens.
set -x
B=$PWD/.carry/s15
for f in kt cpuexperts.test routed.test kt.test; do xz -dc $B/$f.xz > /tmp/$f && chmod +x /tmp/$f; done
(cd moe/cpuexperts && timeout 240 /tmp/cpuexperts.test 2>&1 | tail -5)
(cd models/internal/routed && timeout 60 /tmp/routed.test -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)" | head -60)
(cd cmd/kt && timeout 60 /tmp/kt.test -test.run 'Quant|MoEShapes|ShapeMethods|BenchLayersMemory|BenchShape' -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)" | head -30)
timeout 200 /tmp/kt bench --type moe --model kimi-k2 --methods AMXINT4,AMXBF16 --tokens 1,4096 --min-time 200ms --phases 2>&1
