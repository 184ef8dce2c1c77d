#!/bin/bash
# Session 19, call 4: where a one-token task's time goes once the hybrid's gap has prefetched its gate/up blocks
# (engine alone: --gap 70us, owned decode, prefetch hit 1 / 0.7 / none), per-thread trace; and the down items'
# size (--fused-items 4 / 8 / 16) with the prefetch.
set -o pipefail
C=$PWD/.carry/s19; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
B="$D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io --cpuinfer 15"
for r in 1 2; do
  for hit in -1 "1 --owned-decode" "0.7 --owned-decode"; do
    timeout 60 $B --prefetch-hit $hit --trace 2>&1 | grep -vE '^#|^$|^cpu features|^method' | cut -c1-220 | sed "s/^/r$r hit $hit: /" | tee -a $L
  done
  for fi in 4 16 32; do
    timeout 60 $B --prefetch-hit 1 --owned-decode --fused-items $fi --trace 2>&1 | grep -E '^AMXINT4|^prefetch' | cut -c1-220 | sed "s/^/r$r items $fi: /" | tee -a $L
  done
done
echo "end $SECONDS s" | tee -a $L
