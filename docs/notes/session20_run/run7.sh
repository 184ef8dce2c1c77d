#!/bin/bash
# Session 20, call 7: the T1 hint on the B tiles (--amx-tile-t1 2 against 0) for the int8 core (AMXINT8, AMXINT4's
# unpacked panels) on Qwen3-30B at 4096 tokens, and for AMXBF16 on Qwen3.5 at 512 and 4096 tokens, alternated six
# times in both orders (call 6: AMXBF16 Qwen3-30B 9 of 10 pairs faster with it, medians 44.75 / 46.85 ms).
set -o pipefail
C=$PWD/.carry/s20d; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) = 1 ]; then o="0 2"; else o="2 0"; fi
  for t1 in $o; do
    timeout 60 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXINT4 --tokens 4096 --min-time 200ms --rounds 3 --amx-tile-t1 $t1 2>&1 \
      | grep -E '^AMX[A-Z0-9]+ +4096 +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ ' | cut -c1-120 | sed "s/^/q30 r$r t1=$t1: /" | tee -a $L
    timeout 60 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXBF16 --tokens 512,4096 --min-time 200ms --rounds 3 --amx-tile-t1 $t1 2>&1 \
      | grep -E '^AMX[A-Z0-9]+ +[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ ' | cut -c1-120 | sed "s/^/q35 r$r t1=$t1: /" | tee -a $L
  done
  echo "r$r $SECONDS s" | tee -a $L
done
