#!/bin/bash
# session 10 call 15: call 14's 4096-token whole-GPU prefill again (its first grouped run read a cold page cache),
# same warm host, two more alternations.
set -o pipefail
C=$PWD/.carry/s10c14; D=/tmp/b; mkdir -p $D
[ -x $D/kt ] || { xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt; }
L=$OUT/log.txt
[ -d /tmp/q35 ] || { echo "no checkpoint (host not warm)" | tee -a $L; exit 1; }
gen() { env $3 timeout 150 $D/kt generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 8 --ignore-eos --device cuda --chunked-prefill-size $1 2>&1 | grep -iE "prompt tokens|error" | cut -c1-200 | sed "s/^/$2 $1: /" | tee -a $L; }
T=4096; P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range($T)))")
for i in 1 2; do
  if [ $((i % 2)) = 1 ]; then gen $T grouped KT_X=1; gen $T per-pair KT_CUDA_MOE_GROUPED=0; else gen $T per-pair KT_CUDA_MOE_GROUPED=0; gen $T grouped KT_X=1; fi
done
echo "end $SECONDS s" | tee -a $L
