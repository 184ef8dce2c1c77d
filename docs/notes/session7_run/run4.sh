#!/bin/bash
# session 7 call 4 (same binaries as call 3): AMXINT8 at 4096 tokens, both shapes, 16 workers, rotating order,
# 8 rounds: N = default (no next-call L2 prefetch for int8), P4 / P8 = --amx-next-lines 4 / 8 (bf16's default is 4).
# Then the full 5-round tables with the setting that beat N in at least 5 of 8 rounds on both shapes with the
# lower median on both (P8 checked first), else the default.
set -o pipefail
C=$PWD/.carry/s7c3; D=/tmp/b; mkdir -p $D
for f in kt; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
ab() { timeout 40 $D/kt bench --type moe --model $3 --methods AMXINT8 --tokens 4096 --min-time 300ms $4 2>&1 | grep -E "^AMXINT8" | sed "s/^/$2 $3 /" | tee -a $L; }
for i in 1 2 3 4 5 6 7 8; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    case $((i % 3)) in
      1) ab $i N $m ""; ab $i P4 $m "--amx-next-lines 4"; ab $i P8 $m "--amx-next-lines 8";;
      2) ab $i P4 $m "--amx-next-lines 4"; ab $i P8 $m "--amx-next-lines 8"; ab $i N $m "";;
      0) ab $i P8 $m "--amx-next-lines 8"; ab $i N $m ""; ab $i P4 $m "--amx-next-lines 4";;
    esac
  done
done
X=""
for p in P8 P4; do
  ok=1
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    r=$(awk -v m=$m -v p=$p '$2==m {t[$1]=t[$1]" "$5} END{split(t["N"],n," "); split(t[p],q," "); w=0; for(i in n) if (q[i]<n[i]) w++; print w}' $L)
    mn=$(grep "^N $m " $L | awk '{print $5}' | sort -n | awk '{a[NR]=$1} END{print (a[4]+a[5])/2}')
    mp=$(grep "^$p $m " $L | awk '{print $5}' | sort -n | awk '{a[NR]=$1} END{print (a[4]+a[5])/2}')
    echo "$m: $p won $r of 8 rounds; medians N $mn ms, $p $mp ms" | tee -a $L
    if [ "$r" -lt 5 ] || awk "BEGIN{exit !($mp >= $mn)}"; then ok=0; fi
  done
  if [ $ok = 1 ]; then X="--amx-next-lines ${p#P}"; break; fi
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m [$X] ($SECONDS s)" | tee -a $L
  [ $SECONDS -lt 330 ] && timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json $X 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
