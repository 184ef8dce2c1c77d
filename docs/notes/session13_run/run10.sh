#!/bin/bash
# session 13 call 10: the CUDA package's tests on main after the review (TestPick's reference now sample.LogSoftmax;
# RouterTopK with padding rows; BenchmarkGEMV's copy bound and its cleanup).
set -o pipefail
C=$PWD/.carry/s13c10; D=/tmp/b; mkdir -p $D
xz -dc $C/cuda.test.xz > $D/cuda.test; chmod +x $D/cuda.test
L=$OUT/log.txt
cd backend/cuda
timeout 400 $D/cuda.test -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|panic' | tee -a $L
timeout 120 $D/cuda.test -test.run XXX -test.bench 'GEMVCopyBound|GEMV/(inproj|lmhead)' -test.benchtime 100x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L
echo "end $SECONDS s" | tee -a $L
