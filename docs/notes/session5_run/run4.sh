#!/bin/bash
# session 5 call 4: does an idle gap between decode tasks (the hybrid step's GPU wait) slow the next task?
# (--gap, with and without pause-only spinning); prefill chunk 128 vs 512 against PyTorch (Qwen3-30B, 4096 tokens).
set -o pipefail
C=$PWD/.carry/s5c4; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
B="$D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4,AMXINT8 --tokens 1 --min-time 1s --trace"
for i in 1 2; do for g in "--gap 0" "--gap 100us" "--gap 100us --spin-pure 400us" "--gap 300us"; do echo "== $g"; timeout 60 $B $g 2>&1 | grep -E "^AMX|read bandwidth" | cut -c1-200; done; done
for i in 1 2 3; do for ch in 128 512; do echo "== prefill chunk $ch"; timeout 150 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --prefill-chunk $ch --compare-torch 2>&1 | grep -E "^AMX|read bandwidth|torch TF"; done; done
