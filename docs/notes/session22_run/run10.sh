#!/bin/bash
# Session 22, call 10: predictions in one kernel (cuda.Device.RouteLogits into the pinned slot) instead of a norm, a
# GEMV and a copy. (a) TestRouteLogits, TestStreamWaitValue; every model test of both families; (b) hybrid decode on
# the synthetic 8-layer Qwen3.5 (AMXINT4, D = 0, 512 tokens), rotated six times: kt_prev (6479bac, three-kernel
# predictions) next, this build next, this build KT_HYBRID_PREDICT=refine.
set -o pipefail
C=$PWD/.carry/s22h; D=/tmp/b; mkdir -p $D
for f in kt kt_prev cuda.test qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd backend/cuda && timeout 100 $D/cuda.test -test.run 'TestRouteLogits|TestStreamWaitValue|TestKernelsWait' -test.v > $OUT/cuda.txt 2>&1; echo "cuda rc=$?" | tee -a $L; grep -E -- '^(--- |    --- |FAIL|ok|PASS)|panic|_test.go' $OUT/cuda.txt | head -20 | tee -a $L)
for m in qwen3next qwen3moe; do
  (cd models/$m && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 150 $D/$m.test -test.v -test.timeout 140s > $OUT/$m.txt 2>&1; echo "$m rc=$?" | tee -a $L; grep -E -- '^(--- FAIL|FAIL|ok|PASS)|panic' $OUT/$m.txt | head -10 | tee -a $L; echo "$m passed: $(grep -c -- '^--- PASS' $OUT/$m.txt)" | tee -a $L)
done
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 bin=$2 pr=$3
  KT_HYBRID_PREDICT=$pr KT_HYBRID_TIMING=1 timeout 100 $D/$bin generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|^hybrid  |prediction:|rror' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-400 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
cfgs=("kt_prev next" "kt next" "kt refine")
for r in 0 1 2 3 4 5; do
  for i in 0 1 2; do
    set -- ${cfgs[$(((i + r) % 3))]}
    gen "r$r $1 $2" $1 $2
  done
done
echo "end $SECONDS s" | tee -a $L
