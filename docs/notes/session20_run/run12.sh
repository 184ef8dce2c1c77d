#!/bin/bash
# Session 20, call 12: with the B tiles loaded with the T1 hint (the default now), which tiles the AMX prefill's L1
# prefetch should cover: B (the default, 2), A (1), both (3) or none (--amx-prefetch -1); Qwen3-30B AMXBF16 at 4096
# tokens, rotated three times, 3 rounds each.
set -o pipefail
C=$PWD/.carry/s20e; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
set -- "--amx-prefetch-tiles 2" "--amx-prefetch-tiles 1" "--amx-prefetch-tiles 3" "--amx-prefetch -1"
for r in 1 2 3; do
  for k in "$@"; do
    timeout 60 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 200ms --rounds 3 --phases $k 2>&1 \
      | grep -E '^AMXBF16 +4096 +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ |of the tile probe' | cut -c1-200 | sed "s/^/r$r $k: /" | tee -a $L
  done
  set -- "${@:2}" "$1"
  echo "r$r $SECONDS s" | tee -a $L
done
