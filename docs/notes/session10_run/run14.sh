#!/bin/bash
# session 10 call 14: prefill of the whole model on the GPU (kt generate --device cuda, no --kt-weight-path: the
# 8-layer synthetic Qwen3.5-35B-width checkpoint, all 256 experts of every layer in VRAM), 4096 and 8192 tokens,
# the MoE op's grouped path (default) against the per-pair kernels (KT_CUDA_MOE_GROUPED=0), alternating in one
# binary; then the hybrid run with every expert on the CPU (AMXINT4) for reference.
set -o pipefail
C=$PWD/.carry/s10c14; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd models/qwen3next && KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1) | tee -a $L; sync
gen() { env $3 timeout 150 $D/kt generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 8 --ignore-eos --device cuda --chunked-prefill-size $1 $4 2>&1 | grep -iE "prompt tokens|error" | cut -c1-200 | sed "s/^/$2 $1: /" | tee -a $L; }
for T in 4096 8192; do
  P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range($T)))")
  echo "== $T tokens ($SECONDS s)" | tee -a $L
  for i in 1 2; do
    if [ $((i % 2)) = 1 ]; then gen $T grouped KT_X=1; gen $T per-pair KT_CUDA_MOE_GROUPED=0; else gen $T per-pair KT_CUDA_MOE_GROUPED=0; gen $T grouped KT_X=1; fi
  done
  gen $T hybrid-cpu KT_X=1 "--kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
  [ $SECONDS -lt 420 ] || break
done
echo "end $SECONDS s" | tee -a $L
