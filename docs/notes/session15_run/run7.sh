#!/bin/bash
# Session 15, call 7: AMXINT4 prefill with the next call's int4 panel prefetched into L2 (--amx-next-lines 4 and 8;
# the default for int8 activations is none), rotated twice on Qwen3-Next's layer (~80 rows an expert at 4096 tokens)
# and Qwen3-30B's.
set -x
B=$PWD/.carry/s15
xz -dc $B/kt.xz > /tmp/kt && chmod +x /tmp/kt
for i in 1 2; do
  for nx in 0 4 8; do
    for m in qwen3-next-80b-a3b qwen3-30b-a3b; do
      echo "=== round $i next-lines $nx $m"
      timeout 100 /tmp/kt bench --type moe --model $m --methods AMXINT4 --tokens 512,4096 --min-time 300ms --phases --amx-next-lines $nx 2>&1 | grep -E "^AMXINT4|at 4096"
    done
  done
done
