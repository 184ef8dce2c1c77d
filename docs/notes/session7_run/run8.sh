#!/bin/bash
# session 7 call 8 (main with bf16 h for int8 activations): engine tests on real AMX; A/B at 16 workers,
# AMXINT8 at 4096 tokens, both shapes, 8 rounds alternating: N = default (bf16 h), F = --intermediate-f32
# (as before); then the full 5-round tables, with F's flag if F beat N in at least 5 of 8 rounds on both shapes
# with the lower median on both.
set -o pipefail
C=$PWD/.carry/s7c8; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestIntermediateBF16|TestOutputStores|TestWholeItems|TestMethodsAgainst|TestFused|TestDetermin' 2>&1 | tail -3) | tee -a $L
ab() { timeout 40 $D/kt bench --type moe --model $3 --methods AMXINT8 --tokens 4096 --min-time 300ms $4 2>&1 | grep -E "^AMX" | sed "s/^/$2 $3 $1 /" | tee -a $L; }
for i in 1 2 3 4 5 6 7 8; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    if [ $((i % 2)) = 1 ]; then ab $i N $m ""; ab $i F $m "--intermediate-f32"; else ab $i F $m "--intermediate-f32"; ab $i N $m ""; fi
  done
done
X="--intermediate-f32"
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  r=$(awk -v m=$m '$2==m && $5==4096 {v[$1" "$3]=$6} END{w=0; for (i=1; i<=8; i++) if (("F "i) in v && v["F "i] < v["N "i]) w++; print w}' $L)
  mn=$(awk -v m=$m '$1=="N" && $2==m && $5==4096 {print $6}' $L | sort -n | awk '{a[NR]=$1} END{print (a[4]+a[5])/2}')
  mf=$(awk -v m=$m '$1=="F" && $2==m && $5==4096 {print $6}' $L | sort -n | awk '{a[NR]=$1} END{print (a[4]+a[5])/2}')
  echo "$m: F beat N in $r of 8 rounds; medians N $mn ms, F $mf ms" | tee -a $L
  if [ "$r" -lt 5 ] || awk "BEGIN{exit !($mf >= $mn)}"; then X=""; fi
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m [$X] ($SECONDS s)" | tee -a $L
  [ $SECONDS -lt 380 ] && timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json $X 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
