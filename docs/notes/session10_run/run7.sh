#!/bin/bash
# session 10 call 7: call 6's one-core runs again (its filter missed the k= level); the same host, warm.
set -o pipefail
C=$PWD/.carry/s10c6; D=/tmp/b; mkdir -p $D
xz -dc $C/moe.test.xz > $D/moe.test; chmod +x $D/moe.test
L=$OUT/log.txt
kb() { echo "== bench $1 ($SECONDS s)" | tee -a $L
  (cd moe/cpuexperts && timeout 200 $D/moe.test -test.run XXX -test.bench "$1" -test.benchtime 1x 2>&1 | grep -E "^Benchmark|FAIL|panic") | tee -a $L; }
kb 'AMXKernel/i8=.*/peak-[12]/threads=1$'
kb 'AMXKernel/i8=false/m=/k=/threads=1resident/'
kb 'AMXKernel/i8=true/m=/k=/threads=1resident/'
kb 'AMXKernel/i8=.*/peak-[12]/threads=1$'
kb 'AMXKernel/i8=false/m=/k=/threads=1resident/'
kb 'AMXKernel/i8=.*/peak-[12]/threads=1$'
echo "end $SECONDS s" | tee -a $L
