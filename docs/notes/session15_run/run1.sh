#!/bin/bash
# Session 15, call 1: the CPU expert engine on layer shapes beyond the two
# (DeepSeek-V3: 7168 x 2048, 256 experts, top-8; Qwen3-Next-80B-A3B: 2048 x 512, 512 experts, top-10),
# PyTorch's expert-by-expert bf16 baseline and the read probe in the same run.
set -x
B=$PWD/.carry/s15
xz -dc $B/kt.xz > /tmp/kt && chmod +x /tmp/kt
nproc; free -g | head -2
/tmp/kt bench --type moe --model deepseek-v3 --methods AMXINT4,AMXINT8,AMXBF16 --tokens 1,32,512,4096 --min-time 200ms --compare-torch --json $OUT/ds.json 2>&1
/tmp/kt bench --type moe --model qwen3-next-80b-a3b --methods AMXINT4,AMXINT8,AMXBF16 --tokens 1,4,32,512,4096 --min-time 200ms --compare-torch --json $OUT/qn.json 2>&1
