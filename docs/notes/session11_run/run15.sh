#!/bin/bash
# session 11 call 15: with the tile probe in every round, does the bf16 next-call L2 prefetch (default 4 lines per tile
# step) help or hurt where the host contends for L2? Qwen3-30B AMXBF16 at 4096 tokens, default vs --amx-next-lines -1,
# alternated four times, 3 rounds each; the engine's share of the probe per run.
set -o pipefail
C=$PWD/.carry/s11c15; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
one() { timeout 100 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 300ms --rounds 3 --phases "$@" 2>&1 | grep -E "^AMXBF16 at|^AMXBF16 +4096 +[0-9.]+ +[0-9]" | head -2 | sed "s/^/${1:-default} /" | tee -a $L; }
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then one; one --amx-next-lines -1; else one --amx-next-lines -1; one; fi
done
echo "end $SECONDS s" | tee -a $L
