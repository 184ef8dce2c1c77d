#!/bin/bash
# session 5 call 5: CPU reads of pinned host memory vs Go memory; the engine table with the new
# prefill chunk default (bf16 128, int8 512) at 1..4096 tokens against PyTorch, both shapes; Qwen3-30B repeats.
set -o pipefail
C=$PWD/.carry/s5c5; D=/tmp/b; mkdir -p $D
for f in kt cuda.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
(cd backend/cuda && $D/cuda.test -test.run XXX -test.bench HostBufferRead -test.benchtime 2000x 2>&1 | grep -E "Benchmark|FAIL|panic")
for m in qwen3.5-35b-a3b qwen3-30b-a3b; do echo "== table $m"; timeout 240 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --compare-torch 2>&1 | grep -vE "^\s*$|^#"; done
for i in 1 2 3; do echo "== repeat $i"; timeout 120 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch 2>&1 | grep -E "^AMX|read bandwidth|torch TF"; done
