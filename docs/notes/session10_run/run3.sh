#!/bin/bash
# session 10 call 3: call 2 showed the 2x2 L1-reload tile ceiling at 2.2 TFLOPS/core on up to 8 cores and
# 0.5 on 12-16, where the engine's bf16 kernels already run; at 8 cores they run at 0.47, far below it.
# Which loop structure gets closer at half the cores, and does the engine gain from it?
#  - BenchmarkAMXKernel: every knob set at 8 and 16 threads (bf16 and int8 layer shapes), the peaks
#  - engine, Qwen3-30B AMXBF16 at 4096 tokens, --cpuinfer 8 and 16, variants rotated, 3 rounds:
#    D default, V1 (--amx-variant 1 --amx-prefetch-tiles 1), P2 (--amx-prefetch 2 --amx-prefetch-tiles 3),
#    K8 (--amx-kblock 8 --amx-prefetch-tiles 1)
set -o pipefail
C=$PWD/.carry/s10c3; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
kb() { echo "== bench $1 ($SECONDS s)" | tee -a $L
  (cd moe/cpuexperts && timeout 200 $D/moe.test -test.run XXX -test.bench "$1" -test.benchtime 1x 2>&1 | grep -E "^Benchmark|FAIL|panic") | tee -a $L; }
declare -A F=([D]="" [V1]="--amx-variant 1 --amx-prefetch-tiles 1" [P2]="--amx-prefetch 2 --amx-prefetch-tiles 3"
  [K8]="--amx-kblock 8 --amx-prefetch-tiles 1")
V=(D V1 P2 K8)
ab() { timeout 40 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 300ms --phases --cpuinfer $3 ${F[$2]} 2>&1 | grep -E "^AMX" | sed "s/^/$2 t$3 $1 /" | tee -a $L; }
kb 'AMXKernel/i8=.*/peak-[12]/'
for i in 1 2 3; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for j in 0 1 2 3; do for t in 8 16; do ab $i ${V[$(( (i + j) % 4 ))]} $t; done; done
done
kb 'AMXKernel/i8=false/m='
kb 'AMXKernel/i8=true/m='
med() { sort -n | awk '{a[NR]=$1} END{print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2}'; }
for c in ${V[@]}; do for t in t8 t16; do
  v=$(awk -v c=$c -v t=$t '$1==c && $2==t && $5==4096 && $8 ~ /%$/ {print $6}' $L | med)
  g=$(awk -v c=$c -v t=$t '$1==c && $2==t && $5==4096 && NF==13 {print $9}' $L | med)
  dn=$(awk -v c=$c -v t=$t '$1==c && $2==t && $5==4096 && NF==13 {print $11}' $L | med)
  echo "median $c $t AMXBF16: total $v, gate/up $g, down $dn" | tee -a $L
done; done
echo "end $SECONDS s" | tee -a $L
