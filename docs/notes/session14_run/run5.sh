#!/bin/bash
# session 14 call 5: the decode MoE kernel variants (gate/up: staged default, pf8, direct, lb6, r2; down: staged
# default, direct, r4): TestMoEKernelVariants (same bits), BenchmarkMoEDecode twice, ncu of the variants.
set -o pipefail
C=$PWD/.carry/s14c4; D=/tmp/b; mkdir -p $D
xz -dc $C/cuda.test.xz > $D/cuda.test; chmod +x $D/cuda.test
L=$OUT/log.txt
cd backend/cuda
timeout 200 $D/cuda.test -test.run 'TestMoEKernelVariants|TestBackendOps/MoE' -test.v 2>&1 | grep -E -- '^\s*--- |^(PASS|FAIL|ok)|panic|out\[' | tee -a $L
for i in 1 2; do
timeout 200 $D/cuda.test -test.run XXX -test.bench 'MoEDecode' -test.benchtime 200x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L
done
echo "== ncu ($SECONDS s)" | tee -a $L
timeout 200 ncu --kernel-name regex:m_moe_ --launch-count 60 --section SpeedOfLight --section Occupancy --section LaunchStats \
  $D/cuda.test -test.run TestMoEKernelVariants > $OUT/ncu_moe.txt 2>&1; echo "ncu rc=$?" | tee -a $L
grep -E '^\s+m_moe|Duration|DRAM Throughput|Achieved Occupancy|Registers Per' $OUT/ncu_moe.txt | head -200 | tee -a $L
echo "end $SECONDS s" | tee -a $L
