#!/bin/bash
# Session 15, call 4: DeepSeek-V3's layer with K slabs (the default now), every method at 1-4096 tokens, PyTorch's
# expert-by-expert bf16 baseline and the read probe in the same run.
set -x
B=$PWD/.carry/s15
xz -dc $B/kt.xz > /tmp/kt && chmod +x /tmp/kt
/tmp/kt bench --type moe --model deepseek-v3 --methods AMXINT4,AMXINT8,AMXBF16 --tokens 1,32,512,4096 --min-time 200ms --compare-torch --phases --json $OUT/ds.json 2>&1
