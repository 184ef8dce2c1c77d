#!/bin/bash
# session 11 call 3: does a tile product's time follow its A/C rows (BenchmarkAMXRows: the L1-reload loop at
# 16/12/8/4 rows, one core and all cores), and the Qwen3-30B 4096-token ratio with the tile probe on this host.
set -o pipefail
C=$PWD/.carry/s11c3; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
rows() { (cd moe/cpuexperts && timeout 90 $D/moe.test -test.run XXX -test.bench 'AMXRows' -test.benchtime 1x 2>&1 | grep -E "^Benchmark|FAIL|panic") | tee -a $L; }
rows
echo "== qwen3-30b 4096 ($SECONDS s)" | tee -a $L
timeout 200 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/ratio.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
rows
echo "end $SECONDS s" | tee -a $L
