#!/bin/bash
# Session 17, call 2: the INT4_KGROUP decode prefetch (kt_new2) against the build before it (kt_a, call 1's kt_new),
# alternated three times at 1, 4 and 32 tokens on both issue shapes; then issue 7's Qwen3-30B AMXBF16 ratio on this
# host (five rounds).
set -o pipefail
C=$PWD/.carry/s17; D=/tmp/b; mkdir -p $D
for f in kt_new2 kt_a; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for r in 1 2 3; do
  for b in kt_a kt_new2; do
    timeout 90 $D/$b bench --type moe --methods INT4_KGROUP --tokens 1,4,32 --min-time 300ms --rounds 3 2>&1 | grep -E '^(INT4|qwen|read)' | sed "s/^/r$r $b: /" | tee -a $L
  done
done
echo "decode $SECONDS s" | tee -a $L
timeout 150 $D/kt_new2 bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
