#!/bin/bash
# session 5 call 1: do AVX-512 dot products add to the AMX tile block on one core (peak mix variants)?
# and the engine against PyTorch with the same thread counts (15 and 16) at 4096 tokens.
set -o pipefail
C=$PWD/.carry/s5c1; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
lscpu | grep -E "Model name|MHz|L1d|L2|L3|Thread|Core"
$D/moe.test -test.run XXX -test.bench 'AMXKernel/.*/peak' -test.benchtime 1x 2>&1 | grep -E "peak|FAIL|panic"
for i in 1 2; do for th in 15 16; do echo "== cpuinfer $th"; timeout 150 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --cpuinfer $th --compare-torch 2>&1 | grep -vE "^\s*$" | tail -8; done; done
