#!/bin/bash
# Session 20, call 5: the AMX prefill's tile loads with the T1 hint (tileloaddt1; --amx-tile-t1 1 = A, 2 = B,
# 3 = both, 0 = plain, the default): bitwise on real AMX (TestAMXKBlockBitwise), then Qwen3-30B at 4096 tokens,
# AMXBF16 and AMXINT8, the four settings rotated three times, 3 rounds each, with the tile probe and phases.
set -o pipefail
C=$PWD/.carry/s20d; D=/tmp/b; mkdir -p $D
for f in kt cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 200 $D/cpuexperts.test -test.run 'AMXKBlockBitwise|AMXInt4Fused' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|panic|t1=[123].*(FAIL|differ)' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
set -- 0 1 2 3
for r in 1 2 3; do
  for t1 in "$@"; do
    timeout 90 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 200ms --rounds 3 --phases --amx-tile-t1 $t1 2>&1 \
      | grep -E '^(AMXBF16|AMXINT8) |of the tile probe|^read bandwidth' | cut -c1-200 | sed "s/^/r$r t1=$t1: /" | tee -a $L
  done
  set -- "${@:2}" "$1"
  echo "r$r $SECONDS s" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
