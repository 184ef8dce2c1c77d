#!/bin/bash
# session 11 call 12 (main at the end of the session): the Qwen3-30B 4096-token ratio with the tile probe on one more
# host, AMXINT8 + AMXBF16, twice.
set -o pipefail
C=$PWD/.carry/s11c12; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
for r in 1 2; do
  echo "== run $r ($SECONDS s)" | tee -a $L
  timeout 200 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/ratio$r.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
