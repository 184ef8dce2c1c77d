#!/bin/bash
# session 8 call 5: the chunked merge (main at 9515423, "N") against call 3's binary (27d7183, "O": the same
# engine with the merge summing one part row after another), AMXINT8 + AMXBF16 at 4096 tokens, both shapes,
# 6 rounds alternating; the merge phase's medians decide.
set -o pipefail
C=$PWD/.carry/s8c5; D=/tmp/b; mkdir -p $D
for f in kt kt_old; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
ab() { timeout 40 $D/$4 bench --type moe --model $3 --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 300ms --phases 2>&1 | grep -E "^AMX" | sed "s/^/$2 $3 $1 /" | tee -a $L; }
for i in 1 2 3 4 5 6; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    if [ $((i % 2)) = 1 ]; then ab $i N $m kt; ab $i O $m kt_old; else ab $i O $m kt_old; ab $i N $m kt; fi
  done
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do for meth in AMXINT8 AMXBF16; do for c in N O; do
  v=$(awk -v m=$m -v c=$c -v k=$meth '$1==c && $2==m && $4==k && $5==4096 && $8 ~ /%$/ {print $6}' $L | sort -n | awk '{a[NR]=$1} END{print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2, NR}')
  g=$(awk -v m=$m -v c=$c -v k=$meth '$1==c && $2==m && $4==k && $5==4096 && NF==13 {print $12}' $L | sort -n | awk '{a[NR]=$1} END{print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2, NR}')
  echo "median $m $meth $c: total $v, merge $g" | tee -a $L
done; done; done
echo "end $SECONDS s" | tee -a $L
