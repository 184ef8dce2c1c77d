#!/bin/bash
# session 6 call 10 (final main): the default single round with the real PyTorch baseline (the server form, method by
# method), and torch_moe.py's own --tokens form, which the bench no longer uses.
set -o pipefail
C=$PWD/.carry/s6c10; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
timeout 150 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT8,AMXBF16 --tokens 1,512 --min-time 200ms --compare-torch 2>&1 | grep -vE "^\s*$" | tee -a $L
timeout 100 python3 moe/cpuexperts/torch_moe.py --hidden 2048 --inter 512 --experts 256 --topk 8 --tokens 1,64 --threads 15 2>&1 | tee -a $L
echo "end $SECONDS s" | tee -a $L
