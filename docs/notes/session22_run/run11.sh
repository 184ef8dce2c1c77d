#!/bin/bash
# Session 22, call 11: m_route_logits with 16-byte loads. TestRouteLogits; hybrid decode on the synthetic 8-layer
# Qwen3.5 (AMXINT4, D = 0, 512 tokens), KT_HYBRID_PREDICT=next against refine, six alternated pairs.
set -o pipefail
C=$PWD/.carry/s22i; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd backend/cuda && timeout 60 $D/cuda.test -test.run 'TestRouteLogits|TestKernelsWait' -test.v 2>&1 | grep -E -- '^(--- |FAIL|ok|PASS)|panic|_test.go' | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
gen() { local tag=$1 pr=$2
  KT_HYBRID_PREDICT=$pr KT_HYBRID_TIMING=1 timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda \
    --max-new-tokens 512 --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off timing|new tokens|prediction:|rror' $D/err.txt | sed -E 's/8 prompt tokens in [^,]*, //' | cut -c1-400 | sed "s/^/$tag: /" | tee -a $L; }
echo "== hybrid ($SECONDS s)" | tee -a $L
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) = 1 ]; then o="next refine"; else o="refine next"; fi
  for pr in $o; do gen "r$r $pr" $pr; done
done
echo "end $SECONDS s" | tee -a $L
