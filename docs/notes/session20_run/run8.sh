#!/bin/bash
# Session 20, call 8: the new default (bf16 B tiles with the T1 hint) against --amx-tile-t1 -1 (plain loads),
# Qwen3-30B AMXBF16 at 4096 tokens, alternated eight times in both orders; the tests on real AMX; issue 7's
# 4096-token target row with the default.
set -o pipefail
C=$PWD/.carry/s20e; D=/tmp/b; mkdir -p $D
for f in kt cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 200 $D/cpuexperts.test -test.run 'AMXKBlockBitwise|AMXInt4Fused|Refusals|MethodsAgainst' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|panic' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
for r in 1 2 3 4 5 6 7 8; do
  if [ $((r % 2)) = 1 ]; then o="-1 0"; else o="0 -1"; fi
  for t1 in $o; do
    timeout 60 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 200ms --rounds 3 --phases --amx-tile-t1 $t1 2>&1 \
      | grep -E '^AMXBF16 +4096 +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ |of the tile probe' | cut -c1-200 | sed "s/^/r$r t1=$t1: /" | tee -a $L
  done
  echo "r$r $SECONDS s" | tee -a $L
done
timeout 150 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
