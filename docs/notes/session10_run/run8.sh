#!/bin/bash
# session 10 call 8: call 7 showed the one-core tile rate moving 2x within seconds (peak-1 0.97 / 1.66 / 2.22),
# so single runs cannot rank kernel variants. Nine interleaved rounds on one core (weights resident in L2), bf16
# at the gate/up shapes (m 128 = the engine's bf16 chunk, m 256), each round with the 2x2 peaks beside them;
# per-config medians of the rate and of its ratio to the same round's L1-reload peak (peak-2).
set -o pipefail
C=$PWD/.carry/s10c6; D=/tmp/b; mkdir -p $D
xz -dc $C/moe.test.xz > $D/moe.test; chmod +x $D/moe.test
L=$OUT/log.txt
for i in 1 2 3 4 5 6 7 8 9; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for f in 'AMXKernel/i8=false/peak-[12]/threads=1$' 'AMXKernel/i8=false/m=(128|256)/k=2048/threads=1resident/(pfB|nopf|pfA|kb8nopf|kb16pfA|v1nopf)$'; do
    (cd moe/cpuexperts && timeout 60 $D/moe.test -test.run XXX -test.bench "$f" -test.benchtime 1x 2>&1 | grep -E "^Benchmark|FAIL|panic" | sed "s/^/$i /") | tee -a $L
  done
done
med() { sort -n | awk '{a[NR]=$1} END{print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2}'; }
for c in peak-1/threads=1 peak-2/threads=1 m=128/k=2048/threads=1resident/{pfB,nopf,pfA,kb8nopf,kb16pfA,v1nopf} m=256/k=2048/threads=1resident/{pfB,nopf,pfA,kb8nopf,kb16pfA,v1nopf}; do
  v=$(grep -F "/i8=false/$c-" $L | awk '{print $(NF-1)}' | med)
  r=$(for i in 1 2 3 4 5 6 7 8 9; do p=$(grep -F "/i8=false/peak-2/threads=1-" $L | awk -v i=$i '$1==i {print $(NF-1)}'); x=$(grep -F "/i8=false/$c-" $L | awk -v i=$i '$1==i {print $(NF-1)}'); awk -v a=$x -v b=$p 'BEGIN{print a/b}'; done | med)
  echo "median $c: $v TFLOPS, $r of peak-2" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
