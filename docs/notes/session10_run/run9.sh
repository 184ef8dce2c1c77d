#!/bin/bash
# session 10 call 9: call 8's one-core medians put the engine's bf16 default (pfB: B tiles 1 step ahead, next-call
# L2 prefetch) at 0.61 of the L1-reload peak and no prefetch (nopf) at 0.66-0.69. More rounds for that pair only:
# 25 interleaved rounds on one core (resident) with peak-2 each round, then 15 on 8 cores (streamed); the two
# configs run in separate invocations, their order alternating.
set -o pipefail
C=$PWD/.carry/s10c6; D=/tmp/b; mkdir -p $D
xz -dc $C/moe.test.xz > $D/moe.test; chmod +x $D/moe.test
L=$OUT/log.txt
kb() { (cd moe/cpuexperts && timeout 60 $D/moe.test -test.run XXX -test.bench "$1" -test.benchtime 1x 2>&1 | grep -E "^Benchmark|FAIL|panic" | sed "s/^/$2 /") | tee -a $L; }
for i in $(seq 1 25); do
  echo "== round $i ($SECONDS s)" | tee -a $L
  kb 'AMXKernel/i8=false/peak-2/threads=1$' $i
  if [ $((i % 2)) = 1 ]; then o="pfB nopf"; else o="nopf pfB"; fi
  for c in $o; do kb "AMXKernel/i8=false/m=(128|256)/k=2048/threads=1resident/$c\$" $i; done
done
for i in $(seq 1 15); do
  echo "== round8 $i ($SECONDS s)" | tee -a $L
  if [ $((i % 2)) = 1 ]; then o="pfB nopf"; else o="nopf pfB"; fi
  for c in $o; do kb "AMXKernel/i8=false/m=(128|256)/k=2048/threads=8/$c\$" t8_$i; done
done
med() { sort -n | awk '{a[NR]=$1} END{print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2, NR}'; }
for c in m=128/k=2048/threads=1resident/{pfB,nopf} m=256/k=2048/threads=1resident/{pfB,nopf} m=128/k=2048/threads=8/{pfB,nopf} m=256/k=2048/threads=8/{pfB,nopf}; do
  v=$(grep -F "/i8=false/$c-" $L | awk '{print $(NF-1)}' | med)
  echo "median $c: $v" | tee -a $L
done
for c in m=128/k=2048/threads=1resident m=256/k=2048/threads=1resident m=128/k=2048/threads=8 m=256/k=2048/threads=8; do
  w=0; n=0
  for i in $(seq 1 25) $(seq 1 15 | sed 's/^/t8_/'); do
    a=$(grep -F "/i8=false/$c/nopf-" $L | awk -v i=$i '$1==i {print $(NF-1)}'); b=$(grep -F "/i8=false/$c/pfB-" $L | awk -v i=$i '$1==i {print $(NF-1)}')
    [ -n "$a" ] && [ -n "$b" ] && { n=$((n+1)); awk -v a=$a -v b=$b 'BEGIN{exit !(a>b)}' && w=$((w+1)); }
  done
  echo "nopf faster than pfB in $w of $n rounds: $c" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
