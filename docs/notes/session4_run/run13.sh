#!/bin/bash
# session 4 call 13: the decode-kernel benchmarks after they share benchGeneralVsNew
set -o pipefail
D=/tmp/b; mkdir -p $D; xz -dc .carry/p13/cuda.test.xz > $D/cuda.test; chmod +x $D/cuda.test
cd backend/cuda; KT_TESTDATA_MODELS=../../testdata/models timeout 200 $D/cuda.test -test.run XXX -test.bench 'LinearDecodeStep|DecodeNormRouter' -test.benchtime 2000x 2>&1 | grep -E "^(Bench|ok|PASS|FAIL|panic)|--- FAIL"
