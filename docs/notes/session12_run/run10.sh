#!/bin/bash
# session 12 call 10: the GPU pick tests after Device.launchPick (the cluster launch with its fallback).
set -o pipefail
D=/tmp/b; mkdir -p $D; xz -dc $PWD/.carry/s12c10/cuda.test.xz > $D/cuda.test; chmod +x $D/cuda.test
L=$OUT/log.txt
(cd backend/cuda && timeout 200 $D/cuda.test -test.run 'TestPick|TestBackendOps/Pick|TestGraphDecodeStep|TestKernelSourcesIndex' -test.v 2>&1 \
  | grep -E -- '--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)|picks identical|picked|logprob|panic' | head -40 | tee -a $L)
