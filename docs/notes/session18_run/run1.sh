#!/bin/bash
# Session 18, call 1: (1) BenchmarkIntFewRows (the integer kernels alone at 16-32 rows per call, AMX beside VNNI,
# streamed and resident weights, half and all cores); (2) the AVX2 decode kernels' new panel prefetch (kt_new)
# against the build before it (kt_old, 606939f), --isa avx2, alternated twice; (3) issue 7's Qwen3-30B AMXBF16
# ratio on this host.
set -o pipefail
C=$PWD/.carry/s18; D=/tmp/b; mkdir -p $D
for f in kt_old kt_new cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|MHz' | tee -a $L
timeout 240 $D/cpuexperts.test -test.run XXX -test.bench IntFewRows -test.benchtime 1x 2>&1 | tee -a $L
echo "fewrows $SECONDS s" | tee -a $L
for r in 1 2; do
  for b in kt_old kt_new; do
    timeout 120 $D/$b bench --type moe --isa avx2 --methods AMXINT4,INT4_KGROUP,AMXINT8,AMXBF16 --tokens 1,4,32 --min-time 200ms 2>&1 \
      | grep -E '^(AMX|INT4|qwen|read)' | grep -v "tile probe" | sed "s/^/r$r $b: /" | tee -a $L
    echo "r$r $b $SECONDS s" | tee -a $L
  done
done
timeout 150 $D/kt_new bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
