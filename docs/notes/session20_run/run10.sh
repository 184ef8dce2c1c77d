#!/bin/bash
# Session 20, call 10: issue 7's one-token rows with the final build, whole output kept (call 9's tail cut them).
set -o pipefail
C=$PWD/.carry/s20e; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
timeout 200 $D/kt bench --type moe --methods AMXINT4,INT4_KGROUP,AMXINT8,AMXBF16 --tokens 1 --min-time 200ms --rounds 3 2>&1 | tee -a $L
echo "end $SECONDS s" | tee -a $L
