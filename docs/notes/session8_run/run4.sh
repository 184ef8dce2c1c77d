#!/bin/bash
# session 8 call 4 (main at 27d7183, the session's final engine): the qwen3next hybrid tests on the H100 (the
# phased path's early start touches every prefill task), then the 4096-token ratios twice more per shape:
# AMXINT8 and AMXBF16 at 1 and 4096 tokens, 5 rounds, --compare-torch.
set -o pipefail
C=$PWD/.carry/s8c4; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 120 $D/qwen3next.test -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' 2>&1 | tail -3) | tee -a $L
for r in 1 2; do
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    echo "== ratios $r $m ($SECONDS s)" | tee -a $L
    [ $SECONDS -lt 450 ] && timeout 120 $D/kt bench --type moe --model $m --methods AMXINT8,AMXBF16 --tokens 1,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/ratio${r}_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
  done
done
echo "end $SECONDS s" | tee -a $L
