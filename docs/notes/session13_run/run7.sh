#!/bin/bash
# session 13 call 7: call 6's engine-alone rows again, nothing else running (call 6 generated the checkpoint beside
# them): 1 token, bf16 against f32 activations (--f32-io), traced, alternated three times.
set -o pipefail
C=$PWD/.carry/s13c6; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
alone() { local tag=$1; shift
  timeout 120 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --rounds 3 --cpuinfer 15 --gap 70us --trace "$@" 2>&1 \
    | grep -E "^AMXINT4|read bandwidth|per-thread done" | sed "s/^/$tag: /" | tee -a $L; }
alone warm >/dev/null
for r in 1 2 3; do alone "bf16 r$r"; alone "f32 r$r" --f32-io; done
echo "end $SECONDS s" | tee -a $L
