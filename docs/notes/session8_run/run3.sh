#!/bin/bash
# session 8 call 3 (main at 27d7183: early start + AMX down kernels rounding into bf16 slot outputs; pipeline off):
# engine tests on real AMX; A/B at 4096 tokens, AMXINT8 + AMXBF16, both shapes, 6 rounds alternating:
# N = default, O = as before (--route-first --down-via-f32); then the full 5-round tables.
set -o pipefail
C=$PWD/.carry/s8c3; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 150 $D/moe.test -test.run 'TestDownKernelRounds|TestMergePipeline|TestEarlyStart|TestSlotOutputs|TestWholeItems|TestOutputStores|TestIntermediateBF16|TestMethodsAgainst|TestFused|TestDetermin|TestLoRA' 2>&1 | tail -3) | tee -a $L
ab() { timeout 40 $D/kt bench --type moe --model $3 --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 300ms --phases $4 2>&1 | grep -E "^AMX" | sed "s/^/$2 $3 $1 /" | tee -a $L; }
O="--route-first --down-via-f32"
for i in 1 2 3 4 5 6; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    if [ $((i % 2)) = 1 ]; then ab $i N $m ""; ab $i O $m "$O"; else ab $i O $m "$O"; ab $i N $m ""; fi
  done
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do for meth in AMXINT8 AMXBF16; do for c in N O; do
  v=$(awk -v m=$m -v c=$c -v k=$meth '$1==c && $2==m && $4==k && $5==4096 && $8 ~ /%$/ {print $6}' $L | sort -n | awk '{a[NR]=$1} END{print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2, NR}')
  echo "median $m $meth $c: $v" | tee -a $L
done; done; done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m ($SECONDS s)" | tee -a $L
  [ $SECONDS -lt 360 ] && timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
