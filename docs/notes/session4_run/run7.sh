#!/bin/bash
# session 4 call 7: layerwise prefill with the parallel staging copy
set -o pipefail
C=$PWD/.carry/p7; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
for L in 4096 8192; do
P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range($L)))")
for i in 1 2; do for th in 0 1024; do echo "== $L tokens, threshold $th $(date +%T)"; timeout 120 $D/kt generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 4 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --chunked-prefill-size $L --kt-gpu-prefill-token-threshold $th 2>&1 | grep -iE "prompt tokens|layerwise prefill:" | grep -v "prepare weight" | cut -c1-250; done; done; done
echo "== end $(date +%T)"
