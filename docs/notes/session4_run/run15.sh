#!/bin/bash
# session 4 call 15: every GPU test after the review commits
set -o pipefail
C=$PWD/.carry/p15; D=/tmp/b; mkdir -p $D
for f in cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
export KT_TESTDATA_MODELS=$PWD/testdata/models
(cd backend/cuda; timeout 240 $D/cuda.test -test.v > $OUT/cuda_tests.log 2>&1; echo "cuda rc=$?"; grep -E "^(--- FAIL|    --- FAIL|FAIL|panic)" $OUT/cuda_tests.log | head; grep -c "^--- PASS" $OUT/cuda_tests.log)
(cd models/qwen3next; timeout 240 $D/qwen3next.test -test.v > $OUT/q.log 2>&1; echo "qwen3next rc=$?"; grep -E "^(--- FAIL|FAIL|panic)" $OUT/q.log | head; grep -c "^--- PASS" $OUT/q.log; grep -E "^(--- |PASS|FAIL|ok)" $OUT/q.log > $OUT/qwen3next_tests.txt; rm $OUT/q.log)
grep -E "^(--- |PASS|FAIL|ok)" $OUT/cuda_tests.log > $OUT/cuda_tests.txt; rm $OUT/cuda_tests.log
