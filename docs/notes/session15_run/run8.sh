#!/bin/bash
# Session 15, call 8: AMXINT4 prefill unpacking its int4 panels 8 or 16 int8 tile steps at a time
# (--amx-int4-block) against the whole K at once, rotated twice over three layer shapes.
set -x
B=$PWD/.carry/s15
xz -dc $B/kt.xz > /tmp/kt && chmod +x /tmp/kt
for i in 1 2; do
  for ib in 0 8 16; do
    for m in qwen3-next-80b-a3b qwen3-30b-a3b qwen3.5-35b-a3b; do
      echo "=== round $i int4-block $ib $m"
      timeout 100 /tmp/kt bench --type moe --model $m --methods AMXINT4 --tokens 512,4096 --min-time 300ms --phases --amx-int4-block $ib 2>&1 | grep -E "^AMXINT4|at 4096"
    done
  done
done
