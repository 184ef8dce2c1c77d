#!/bin/bash
# session 14 call 4: the decode MoE op over bf16 experts (all on the GPU). TestMoEKernelVariants (every gate/up
# kernel gives the default's bits); BenchmarkMoEDecode (16 routings per graph, B = 1 and 4, Qwen3-30B and Qwen3.5
# shapes, each gate/up variant, the copy bound beside); ncu of the gate/up and down kernels.
set -o pipefail
C=$PWD/.carry/s14c4; D=/tmp/b; mkdir -p $D
xz -dc $C/cuda.test.xz > $D/cuda.test; chmod +x $D/cuda.test
L=$OUT/log.txt
cd backend/cuda
timeout 200 $D/cuda.test -test.run 'TestMoEKernelVariants|TestBackendOps/MoE|TestEarlyLaunchChain' -test.v 2>&1 | grep -E -- '^\s*--- |^(PASS|FAIL|ok)|panic|out\[' | tee -a $L
for i in 1 2; do
timeout 200 $D/cuda.test -test.run XXX -test.bench 'MoEDecode' -test.benchtime 200x 2>&1 | grep -E 'Benchmark|FAIL|panic' | tee -a $L
done
echo "== ncu ($SECONDS s)" | tee -a $L
timeout 200 ncu --kernel-name regex:m_moe_ --launch-count 40 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  $D/cuda.test -test.run TestMoEKernelVariants > $OUT/ncu_moe.txt 2>&1; echo "ncu rc=$?" | tee -a $L
grep -E '^\s+m_moe|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Stall|Block Limit' $OUT/ncu_moe.txt | head -150 | tee -a $L
echo "end $SECONDS s" | tee -a $L
