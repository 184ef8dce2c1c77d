#!/bin/bash
# Session 18, call 7: issue 7's table with the session's final build (kt_final: AVX2 decode prefetch, the fused int4
# unpack, AMXINT4 on AMX from 4 tokens): the four AMX methods at the token counts on both shapes, PyTorch
# alongside.
set -o pipefail
C=$PWD/.carry/s18; D=/tmp/b; mkdir -p $D
xz -dc $C/kt_final.xz > $D/kt_final; chmod +x $D/kt_final
L=$OUT/log.txt
timeout 320 $D/kt_final bench --type moe --methods AMXINT4,INT4_KGROUP,AMXINT8,AMXBF16 --tokens 1,4,32,512,4096 --min-time 200ms --compare-torch 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
