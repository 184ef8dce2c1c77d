#!/bin/bash
# Session 21, call 4 (main's build, c6aa65f): (a) the one-token decode kernels with their weights resident in each
# thread's L2 against streamed (BenchmarkDecodeKernel, 1, 8 and 16 threads): is a hybrid layer's gate/up, after a
# right prediction (~20 GB/s per worker in calls 2-3), the kernels' arithmetic with two threads per core, or the
# caches? (b) issue 7's 4096-token target row, twice.
set -o pipefail
C=$PWD/.carry/s21d; D=/tmp/b; mkdir -p $D
for f in kt cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for r in 1 2; do
  (cd moe/cpuexperts && timeout 150 $D/cpuexperts.test -test.run XXX -test.bench 'DecodeKernel' -test.benchtime 1x 2>&1 | grep -E 'Benchmark|FAIL|panic' | sed "s/^/r$r /" | tee -a $L)
done
echo "== issue 7 ($SECONDS s)" | tee -a $L
for r in 1 2; do
  timeout 170 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
