#!/bin/bash
# Session 15, call 5: (1) AMXINT8 on DeepSeek-V3's layer at 4096 tokens, where one call's activations (917 KB) stay
# under the 1 MiB slab threshold: default against --amx-slab 524288 (slabs), alternated twice; (2) issue 7's targets
# on the Qwen shapes with this session's engine (their gate/up calls stay whole).
set -x
B=$PWD/.carry/s15
xz -dc $B/kt.xz > /tmp/kt && chmod +x /tmp/kt
for i in 1 2; do
  for slab in 0 524288; do
    echo "=== round $i slab $slab"
    timeout 120 /tmp/kt bench --type moe --model deepseek-v3 --methods AMXINT8 --tokens 4096 --min-time 300ms --phases --amx-slab $slab 2>&1 | grep -v "^#"
  done
done
echo "=== issue 7 targets"
timeout 150 /tmp/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1
timeout 280 /tmp/kt bench --type moe --methods AMXINT4,AMXINT8,AMXBF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 3 --compare-torch 2>&1
