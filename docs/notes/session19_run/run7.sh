#!/bin/bash
# Session 19, call 7: a one-token task after an owned prefetch of the right experts spends ~40-46 us in gate/up
# (call 6) where the kernels alone would read its blocks from L2 in ~20 (call 5's BenchmarkDecodeKernel, resident,
# 16 threads). Does the decode kernels' own prefetch (2048 bytes ahead, so 2 KiB past each panel into a block another
# worker owns) or the head prefetch cost there? Engine alone (this build, kt_cur), --gap 70us, owned decode, hit 1,
# traced: default against --decode-prefetch 512 / -1, --decode-head -1 and --fused-items 4, rotated three times.
set -o pipefail
C=$PWD/.carry/s19; D=/tmp/b; mkdir -p $D
xz -dc $C/kt_cur.xz > $D/kt_cur; chmod +x $D/kt_cur
L=$OUT/log.txt
for r in 1 2 3; do
  for v in "" "--decode-prefetch 512" "--decode-prefetch -1" "--decode-head -1" "--fused-items 4"; do
    timeout 60 $D/kt_cur bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4,INT4_KGROUP --tokens 1 --min-time 300ms --gap 70us --f32-io \
      --cpuinfer 15 --prefetch-hit 1 --owned-decode --trace $v 2>&1 | grep -E '^(AMXINT|INT4)|^read' | cut -c1-200 | sed "s/^/r$r [$v]: /" | tee -a $L
  done
done
echo "end $SECONDS s" | tee -a $L
