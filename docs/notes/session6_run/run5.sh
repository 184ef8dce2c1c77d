#!/bin/bash
# session 6 call 5 (main 3fb5b0d: bf16 x in place, vectorized int8 quantize): engine tests on real AMX; the hybrid
# model tests on the GPU; the full table for both shapes, 5 rounds with the PyTorch baseline right before the engine
# each time; Qwen3-30B at 16 threads; then the next-call L2 prefetch (--amx-next-lines 0/4/8/16) alternated.
set -o pipefail
C=$PWD/.carry/s6c5; D=/tmp/b; mkdir -p $D
for f in kt moe.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
export KT_TESTDATA_MODELS=$PWD/testdata/models
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestQuantizeRow|TestBF16InputInPlace|TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestLoRA|TestTileLayout|TestSyncHelp|TestHostTask' 2>&1 | tail -3) | tee -a $L
(cd models/qwen3next && timeout 200 $D/qwen3next.test -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' -test.v 2>&1 | grep -E "^(--- |ok|PASS|FAIL)" | tail -6) | tee -a $L
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do echo "== table $m ($SECONDS s)" | tee -a $L; timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L; done
echo "== 16 threads ($SECONDS s)" | tee -a $L; [ $SECONDS -lt 450 ] && timeout 70 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --cpuinfer 16 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
for i in 1 2 3 4; do for n in 0 4 8 16; do
  [ $SECONDS -gt 560 ] && break
  echo "== $i next-lines $n ($SECONDS s)" | tee -a $L; timeout 30 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --amx-next-lines $n 2>&1 | grep -E "^AMX" | tee -a $L
done; done
echo "end $SECONDS s" | tee -a $L
