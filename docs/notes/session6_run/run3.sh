#!/bin/bash
# session 6 call 3 (main with kt bench --rounds): engine tests on real AMX; the full table for both shapes with the
# PyTorch baseline run right before the engine in each of 5 rounds; Qwen3-30B 4096 tokens at 16 threads (PyTorch
# takes the better of 15 and 16); the bf16 prefill kernel-call size 64/128/256 (5 rounds each, no baseline).
set -o pipefail
C=$PWD/.carry/s6c3; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestBF16InputInPlace|TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestLoRA|TestTileLayout' 2>&1 | tail -3) | tee -a $L
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do echo "== table $m ($SECONDS s)" | tee -a $L; timeout 280 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L; done
echo "== 16 threads ($SECONDS s)" | tee -a $L; [ $SECONDS -lt 470 ] && timeout 80 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --cpuinfer 16 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
for c in 64 128 256; do echo "== chunk $c ($SECONDS s)" | tee -a $L; [ $SECONDS -lt 560 ] && timeout 30 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --prefill-chunk $c 2>&1 | grep -E "^AMX" | tee -a $L; done
echo "end $SECONDS s" | tee -a $L
