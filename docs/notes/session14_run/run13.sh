#!/bin/bash
# session 14 call 13: kt doctor's GPU lines on the final build (early launch reported), with KT_CUDA_PDL=0 too.
C=$PWD/.carry/s14c13; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
$D/kt doctor 2>&1 | grep -E "gpu|GPU" | tee -a $L
KT_CUDA_PDL=0 $D/kt doctor --json 2>&1 | python3 -c "import json,sys; d=json.load(sys.stdin); print([ (r['name'], r.get('data',{}).get('early_launch')) for r in d.get('results', d) if 'kernels' in r['name']])" 2>&1 | tee -a $L
