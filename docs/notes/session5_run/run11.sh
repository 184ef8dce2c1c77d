#!/bin/bash
# session 5 call 11: phased tasks alternate between two converted-row buffers (Xt) — does the convert phase
# go back to its pre-gather time? old = main adbc990 (one Xt) vs new, alternated, --phases, 4096 tokens.
set -o pipefail
C=$PWD/.carry/s5c11; D=/tmp/b; mkdir -p $D
for f in kt kt.old; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
for i in 1 2 3; do for b in kt.old kt; do for m in qwen3-30b-a3b qwen3.5-35b-a3b; do echo "== $b $m"; timeout 100 $D/$b bench --type moe --model $m --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --phases 2>&1 | grep -E "^AMX"; done; done; done
