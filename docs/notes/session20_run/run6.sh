#!/bin/bash
# Session 20, call 6: AMXBF16's B tiles with the T1 hint (--amx-tile-t1 2) against plain loads (0), Qwen3-30B at
# 4096 tokens, alternated ten times in both orders (calls 5 and 5b: 2 faster than 0 in 5 of 6 rounds, medians
# 36.7 / 38.1 ms), with the tile probe's share.
set -o pipefail
C=$PWD/.carry/s20d; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for r in 1 2 3 4 5 6 7 8 9 10; do
  if [ $((r % 2)) = 1 ]; then o="0 2"; else o="2 0"; fi
  for t1 in $o; do
    timeout 60 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 200ms --rounds 3 --phases --amx-tile-t1 $t1 2>&1 \
      | grep -E '^AMXBF16 +4096 +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ |of the tile probe' | cut -c1-200 | sed "s/^/r$r t1=$t1: /" | tee -a $L
  done
  echo "r$r $SECONDS s" | tee -a $L
done
