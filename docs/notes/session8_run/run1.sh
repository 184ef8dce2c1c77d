#!/bin/bash
# session 8 call 1 (main at 097c8f6 + BenchmarkAMXKernelShapes): where AMXINT8's time goes at 4096 tokens.
# 1. the AMX kernels alone at the layer shapes, weights streamed vs L2-resident, 8 vs 16 cores;
# 2. the engine at 8 / 12 / 16 workers, AMXINT8 and AMXBF16, both shapes, phases (does int8 stop scaling?);
# 3. AMXINT8 / AMXBF16 with f32 slot outputs (twice the Y traffic) against the default, alternated.
set -o pipefail
C=$PWD/.carry/s8c1; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
lscpu | grep -E "Model name|MHz|L2|L3" | tee -a $L; which perf 2>&1 | tee -a $L
(cd moe/cpuexperts && timeout 150 $D/moe.test -test.run XXX -test.bench AMXKernelShapes -test.benchtime 1x 2>&1 | grep -E "TFLOPS|FAIL|panic") | tee -a $L
echo "== engine scaling ($SECONDS s)" | tee -a $L
for i in 1 2; do
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    for n in 8 12 16; do
      timeout 40 $D/kt bench --type moe --model $m --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 300ms --phases --cpuinfer $n 2>&1 | grep -E "^AMX" | sed "s/^/$i $m $n /" | tee -a $L
    done
  done
done
echo "== f32 slot outputs ($SECONDS s)" | tee -a $L
for i in 1 2; do
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    for y in "" "--slot-outputs-f32"; do
      timeout 40 $D/kt bench --type moe --model $m --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 300ms --phases $y 2>&1 | grep -E "^AMX" | sed "s/^/$i $m y${y:+32} /" | tee -a $L
    done
  done
done
echo "end $SECONDS s" | tee -a $L
