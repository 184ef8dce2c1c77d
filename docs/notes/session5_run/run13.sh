#!/bin/bash
# session 5 call 13: 512 tokens (16-32 tokens per expert) before the per-item gather (810f884) and on the final main,
# alternated three times, both shapes.
set -o pipefail
C=$PWD/.carry/s5c13; D=/tmp/b; mkdir -p $D
for f in kt kt.old; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
for i in 1 2 3; do for b in kt.old kt; do for m in qwen3.5-35b-a3b qwen3-30b-a3b; do echo "== $b $m"; timeout 100 $D/$b bench --type moe --model $m --methods AMXBF16,AMXINT8,AMXINT4 --tokens 512 --min-time 300ms 2>&1 | grep -E "^AMX|read bandwidth"; done; done; done
