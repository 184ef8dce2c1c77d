#!/bin/bash
# session 7 call 7 (main with output rows stored around the caches): engine tests on real AMX; A/B/C at 16 workers,
# AMXINT8 and AMXBF16 at 4096 tokens, both shapes, 6 rounds rotating: N = default, C = --output-cached (as
# before), Y = --slot-outputs-cached. Then the full 5-round tables, with C's or Y's flag if it beat N on the
# sum of the two methods' times in at least 4 of 6 rounds on both shapes with the lower median on both.
set -o pipefail
C=$PWD/.carry/s7c7; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestOutputStores|TestSlotOutputs|TestWholeItems|TestMethodsAgainst|TestFused|TestDetermin|TestBF16InputInPlace|TestLoRA' 2>&1 | tail -3) | tee -a $L
ab() { timeout 40 $D/kt bench --type moe --model $3 --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 300ms $4 2>&1 | grep -E "^AMX" | sed "s/^/$2 $3 $1 /" | tee -a $L; }
for i in 1 2 3 4 5 6; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    case $((i % 3)) in
      1) ab $i N $m ""; ab $i C $m "--output-cached"; ab $i Y $m "--slot-outputs-cached";;
      2) ab $i C $m "--output-cached"; ab $i Y $m "--slot-outputs-cached"; ab $i N $m "";;
      0) ab $i Y $m "--slot-outputs-cached"; ab $i N $m ""; ab $i C $m "--output-cached";;
    esac
  done
done
X=""
for p in C Y; do
  ok=1
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    # sum of AMXINT8 and AMXBF16 ms per (config, round)
    awk -v m=$m '$2==m && $5==4096 {s[$1" "$3]+=$6} END{for (k in s) print k, s[k]}' $L > /tmp/sums
    r=$(awk -v p=$p '{v[$1" "$2]=$3} END{w=0; for (i=1; i<=6; i++) if ((p" "i) in v && v[p" "i] < v["N "i]) w++; print w}' /tmp/sums)
    mn=$(awk '$1=="N"{print $3}' /tmp/sums | sort -n | awk '{a[NR]=$1} END{print (a[3]+a[4])/2}')
    mp=$(awk -v p=$p '$1==p{print $3}' /tmp/sums | sort -n | awk '{a[NR]=$1} END{print (a[3]+a[4])/2}')
    echo "$m: $p beat N in $r of 6 rounds; median sums N $mn ms, $p $mp ms" | tee -a $L
    if [ "$r" -lt 4 ] || awk "BEGIN{exit !($mp >= $mn)}"; then ok=0; fi
  done
  if [ $ok = 1 ]; then [ $p = C ] && X="--output-cached"; [ $p = Y ] && X="--slot-outputs-cached"; break; fi
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m [$X] ($SECONDS s)" | tee -a $L
  [ $SECONDS -lt 380 ] && timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json $X 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
