#!/bin/bash
# session 14 call 8: what the hybrid hand-off's copies cost on the critical path (BenchmarkHandOff: 16 layers per
# graph; three device-to-host copies, one, the producer kernel writing the pinned buffer through its device address;
# a host-to-device copy against the next kernel reading the pinned buffer).
set -o pipefail
C=$PWD/.carry/s14c8; D=/tmp/b; mkdir -p $D
xz -dc $C/cuda.test.xz > $D/cuda.test; chmod +x $D/cuda.test
L=$OUT/log.txt
cd backend/cuda
for i in 1 2 3; do
timeout 100 $D/cuda.test -test.run XXX -test.bench 'HandOff' -test.benchtime 500x 2>&1 | grep -E 'Benchmark|FAIL|panic' | awk '{print $1, $(NF-1), $NF}' | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
