#!/bin/bash
# session 14 call 11: the final build's tests on the H100 machine: every test of backend/cuda, models/qwen3next,
# models/qwen3moe and cmd/kt (GPU tests included).
set -o pipefail
C=$PWD/.carry/s14c11; D=/tmp/b; mkdir -p $D
for f in cuda.test qwen3next.test qwen3moe.test kt.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
t() { local dir=$1 bin=$2
  (cd $dir && timeout 280 $D/$bin -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|panic' | tee $D/$bin.txt | grep -v -- '--- PASS' | head -30 | sed "s|^|$dir: |" | tee -a $L
   echo "$dir: passed $(grep -c -- '--- PASS' $D/$bin.txt), failed $(grep -c -- '--- FAIL' $D/$bin.txt), skipped $(grep -c -- '--- SKIP' $D/$bin.txt) ($SECONDS s)" | tee -a $L); }
t backend/cuda cuda.test
t models/qwen3next qwen3next.test
t models/qwen3moe qwen3moe.test
t cmd/kt kt.test
echo "end $SECONDS s" | tee -a $L
