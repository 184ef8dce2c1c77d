#!/bin/bash
# session 11 call 14: kt doctor --measure on the GPU machine (read bandwidth, AMX tile rate, the decode bound of the
# Qwen3.5 test fixture's experts) and the doctor tests on real AMX.
set -o pipefail
C=$PWD/.carry/s11c14; D=/tmp/b; mkdir -p $D
for f in kt doctor.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd doctor && timeout 120 $D/doctor.test -test.v -test.run 'TestPerfChecks|TestMachine' 2>&1 | grep -E "^(--- |ok|PASS|FAIL|panic)" | tee -a $L)
for r in 1 2; do timeout 120 $D/kt doctor --measure --model-path testdata/models/qwen35moe-b 2>&1 | grep -A2 -E "perf\.|passed" | tee -a $L; done
echo "end $SECONDS s" | tee -a $L
