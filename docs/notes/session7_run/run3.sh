#!/bin/bash
# session 7 call 3 (main with the same-round AMXINT8 ÷ AMXBF16 in kt bench): AMXINT8 at 4096 tokens, both shapes,
# 16 workers, rotating order, 6 rounds: N = default, P = next-call L2 prefetch for int8 too (--amx-next-lines 4;
# bf16's default), S = --split-items. Then the full 5-round tables (with P's setting if P beat N in at least 4 of
# 6 rounds on both shapes and had the lower median on both).
set -o pipefail
C=$PWD/.carry/s7c3; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
ab() { echo "== round $1 $2 $3 ($SECONDS s)" | tee -a $L; timeout 40 $D/kt bench --type moe --model $3 --methods AMXINT8 --tokens 4096 --min-time 300ms --phases $4 2>&1 | grep -E "^AMX" | sed "s/^/$2 $3 /" | tee -a $L; }
for i in 1 2 3 4 5 6; do
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    case $((i % 3)) in
      1) ab $i N $m ""; ab $i P $m "--amx-next-lines 4"; ab $i S $m "--split-items";;
      2) ab $i P $m "--amx-next-lines 4"; ab $i S $m "--split-items"; ab $i N $m "";;
      0) ab $i S $m "--split-items"; ab $i N $m ""; ab $i P $m "--amx-next-lines 4";;
    esac
  done
done
X="--amx-next-lines 4"
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  r=$(awk -v m=$m '$2==m && $3=="AMXINT8" && NF>12 {t[$1]=t[$1]" "$5} END{split(t["N"],n," "); split(t["P"],p," "); w=0; for(i in n) if (p[i]<n[i]) w++; print w}' $L)
  mn=$(grep "^N $m AMXINT8" $L | awk 'NF>12{print $5}' | sort -n | awk '{a[NR]=$1} END{print (a[3]+a[4])/2}')
  mp=$(grep "^P $m AMXINT8" $L | awk 'NF>12{print $5}' | sort -n | awk '{a[NR]=$1} END{print (a[3]+a[4])/2}')
  echo "$m: P won $r of 6 rounds; medians N $mn ms, P $mp ms" | tee -a $L
  if [ "$r" -lt 4 ] || awk "BEGIN{exit !($mp >= $mn)}"; then X=""; fi
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m [$X] ($SECONDS s)" | tee -a $L
  timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json $X 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
