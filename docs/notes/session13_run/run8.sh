#!/bin/bash
# session 13 call 8 (exploration): the decode GEMV kernels beside a copy of the same bytes (BenchmarkGEMV,
# BenchmarkGEMVCopyBound, new), with four experimental variants (fewer loads in flight per warp, a register cap
# for 4 blocks per SM, 4-warp blocks); ncu's launch statistics and occupancy of the in-projection shape.
set -o pipefail
C=$PWD/.carry/s13c8; D=/tmp/b; mkdir -p $D
xz -dc $C/cuda.test.xz > $D/cuda.test; chmod +x $D/cuda.test
L=$OUT/log.txt
cd backend/cuda
timeout 120 $D/cuda.test -test.run 'TestBackendOps/MatMul' -test.v 2>&1 | grep -E -- '--- (PASS|FAIL)|^(ok|FAIL|PASS)' | head -10 | tee -a $L
for r in 1 2; do
  timeout 200 $D/cuda.test -test.run XXX -test.bench 'GEMV' -test.benchtime 300x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L
done
timeout 200 ncu --clock-control none --kernel-name regex:'m_gemv' --launch-skip 3 --launch-count 6 --section LaunchStats --section Occupancy --section SpeedOfLight \
  $D/cuda.test -test.run XXX -test.bench 'GEMV/inproj' -test.benchtime 4x > $OUT/ncu_gemv.txt 2>&1; echo "ncu rc=$?" | tee -a $L
grep -E "m_gemv|Registers Per Thread|Theoretical Occupancy|Achieved Occupancy|Waves Per SM|Block Limit Registers|Duration|Memory Throughput|DRAM Throughput" $OUT/ncu_gemv.txt | head -80 | tee -a $L
