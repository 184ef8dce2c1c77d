#!/bin/bash
# session 10 call 5 (main at 2958459, the engine unchanged since session 8): the full 5-round tables of both
# shapes on one host, with the tile unit's single-core and all-core rates (BenchmarkAMXPairs, bf16) before
# and after: does the Qwen3-30B AMXBF16 ratio follow the host's all-core tile rate?
set -o pipefail
C=$PWD/.carry/s10c5; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
pairs() { echo "== tile unit ($SECONDS s)" | tee -a $L
  (cd moe/cpuexperts && timeout 60 $D/moe.test -test.run XXX -test.bench 'AMXPairs/i8=false/^cpus=0($|\.\.)' -test.benchtime 1x 2>&1 | grep -E "^Benchmark|FAIL|panic") | tee -a $L; }
pairs
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m ($SECONDS s)" | tee -a $L
  timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
pairs
echo "end $SECONDS s" | tee -a $L
