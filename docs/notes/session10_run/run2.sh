#!/bin/bash
# session 10 call 2 (main at a506fd2 + BenchmarkAMXPairs): on one host, the tile unit's ceilings and the
# engine's Qwen3-30B ratio to PyTorch side by side:
#  - BenchmarkAMXPairs: resident tile products on core 0 alone, on core 0 + each other core, on all 16
#    (does any pair share a tile unit, or is the per-core fall socket-wide?)
#  - BenchmarkAMXKernel peak-2 (operands reloaded from L1 every round: the 2x2 kernel's ceiling), 1..15 cores
#  - BenchmarkAMXKernelShapes bf16 at the gate/up call shape (128 tokens, K 2048)
#  - kt bench AMXINT8,AMXBF16 at 4096 tokens --compare-torch, twice, between the kernel runs
set -o pipefail
C=$PWD/.carry/s10c2; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
ratio() { echo "== ratios $1 ($SECONDS s)" | tee -a $L
  timeout 80 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/ratio$1.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L; }
kb() { echo "== bench $1 ($SECONDS s)" | tee -a $L
  (cd moe/cpuexperts && timeout 150 $D/moe.test -test.run XXX -test.bench "$1" -test.benchtime 1x 2>&1 | grep -E "^Benchmark|FAIL|panic") | tee -a $L; }
ratio 1
kb 'AMXPairs'
kb 'AMXKernel/i8=.*/peak-2/'
kb 'AMXKernelShapes/i8=false/m=128/k=2048/'
ratio 2
kb 'AMXPairs/i8=false'
echo "end $SECONDS s" | tee -a $L
