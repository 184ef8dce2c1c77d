#!/bin/bash
# Session 15, call 3: K slabs on the Qwen3-30B layer (where they are off by default: one call's activations are
# 512 KiB bf16, 1 MiB int8): default against --amx-slab 524288 (int8 calls in 4 slabs) and 262144 (bf16 in 4,
# int8 in 8), rotated twice, 4096 tokens.
set -x
B=$PWD/.carry/s15
xz -dc $B/kt.xz > /tmp/kt && chmod +x /tmp/kt
for i in 1 2; do
  for slab in 0 524288 262144; do
    echo "=== round $i slab $slab"
    timeout 180 /tmp/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 300ms --phases --amx-slab $slab 2>&1 | grep -v "^#"
  done
done
