#!/bin/bash
# session 6 call 6 (main with bf16 next-call L2 prefetch of 4 lines by default): engine tests on real AMX; the
# default vs --amx-next-lines -1 (none), 6 pairs in alternating order, Qwen3-30B 4096 tokens; then the full table
# (5 rounds against PyTorch) with the default if it won at least 4 of 6 pairs with a lower median, else with -1.
set -o pipefail
C=$PWD/.carry/s6c6; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestQuantizeRow|TestBF16InputInPlace|TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestLoRA|TestTileLayout' 2>&1 | tail -3) | tee -a $L
ab() { echo "== pair $1 $2 ($SECONDS s)" | tee -a $L; timeout 30 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms $3 2>&1 | grep -E "^AMX" | sed "s/^/$2 /" | tee -a $L; }
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then ab $i def ""; ab $i none "--amx-next-lines -1"; else ab $i none "--amx-next-lines -1"; ab $i def ""; fi
done
WIN=$(awk '$2=="AMXBF16"{t[$1]=t[$1]" "$4} END{split(t["def"],d," "); split(t["none"],n," "); w=0; for(i in d) if (d[i]<n[i]) w++; print w}' $L)
MD=$(grep '^def AMXBF16' $L | awk '{print $4}' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
MN=$(grep '^none AMXBF16' $L | awk '{print $4}' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
echo "default won $WIN of 6 pairs; medians default $MD ms, none $MN ms" | tee -a $L
X=""; if [ "$WIN" -lt 4 ] || awk "BEGIN{exit !($MD >= $MN)}"; then X="--amx-next-lines -1"; fi
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do echo "== table $m [$X] ($SECONDS s)" | tee -a $L; timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json $X 2>&1 | grep -vE "^\s*$|^#" | tee -a $L; done
echo "== 16 threads ($SECONDS s)" | tee -a $L; [ $SECONDS -lt 520 ] && timeout 70 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --cpuinfer 16 $X 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
