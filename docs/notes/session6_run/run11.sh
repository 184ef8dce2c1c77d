#!/bin/bash
# session 6 call 11 (final main with the hand-vectorized int8 quantizing loop): engine tests on real AMX; the int8
# methods at 1 and 4096 tokens (3 rounds, --phases) for the convert phase.
set -o pipefail
C=$PWD/.carry/s6c11; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestQuantizeRow|TestBF16InputInPlace|TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestLoRA|TestTileLayout|TestSyncHelp|TestHostTask' 2>&1 | tail -3) | tee -a $L
(cd moe/cpuexperts && $D/moe.test -test.run XXX -test.bench QuantizeRowS8 -test.benchtime 200000x 2>&1 | grep Benchmark) | tee -a $L
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do timeout 120 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8 --tokens 1,4096 --min-time 200ms --rounds 3 --phases 2>&1 | grep -vE "^\s*$|^#" | tee -a $L; done
echo "end $SECONDS s" | tee -a $L
