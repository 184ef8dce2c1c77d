#!/bin/bash
# Session 17, call 3: the int8/int4 prefill where experts get few rows (8-64 per expert: 256-1024 tokens) reads its
# weights at about half the read probe. Does the next-call L2 prefetch (off by default for int8 activations) help
# there? kt_new2 with --amx-next-lines 16 against the default, alternated twice, AMXINT4 and AMXINT8, both shapes.
set -o pipefail
C=$PWD/.carry/s17; D=/tmp/b; mkdir -p $D
for f in kt_new2; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for r in 1 2; do
  for nl in 0 16; do
    timeout 130 $D/kt_new2 bench --type moe --methods AMXINT4,AMXINT8 --tokens 256,512,1024 --min-time 200ms --amx-next-lines $nl --phases 2>&1 \
      | grep -E '^(AMX|qwen|read)' | sed "s/^/r$r nl$nl: /" | tee -a $L
    echo "r$r nl$nl $SECONDS s" | tee -a $L
  done
done
