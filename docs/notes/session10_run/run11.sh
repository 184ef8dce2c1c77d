#!/bin/bash
# session 10 call 11: the MoE op's grouped path (each expert's rows as cuBLASLt GEMMs over expert-sorted rows,
# activations in two bf16 parts) for prefill-sized steps. GPU tests first (the op against the CPU op, the existing
# MoE and layerwise tests), then the 8-layer synthetic Qwen3.5 checkpoint as call 10: kt generate at 4096 and 8192
# tokens, AMXINT4, threshold 0 (CPU) and 1024 (layerwise), new (N: grouped) against old (O: call 10's binary, the
# per-pair kernels) alternating; the generated text of CPU, N and O kept for comparison.
set -o pipefail
C=$PWD/.carry/s10c11; D=/tmp/b; mkdir -p $D
for f in kt kt_old qwen3next.test cuda.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd backend/cuda && timeout 200 $D/cuda.test -test.run '^(TestMoEGrouped|TestBackendOps|TestMoETableRefresh|TestExpertFFN)$' -test.v 2>&1 | grep -E "^(--- |PASS|FAIL|ok)|moe_grouped|MoE" | grep -vE "^    --- PASS" | tail -25) | tee -a $L
(cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 200 $D/qwen3next.test -test.run '^(TestLayerwisePrefill|TestDynamicExpertUpdate|TestHybridMatchesCPU)$' -test.v 2>&1 | grep -E "^(--- |PASS|FAIL|ok)" | tail -8) | tee -a $L
(cd models/qwen3next && KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1) | tee -a $L; sync
gen() { timeout 120 $D/$1 generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 8 --ignore-eos --temperature 0 --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --chunked-prefill-size $2 --kt-gpu-prefill-token-threshold $3 > $OUT/gen_$4_$2_th$3_$5.txt 2>&1
  grep -iE "prompt tokens|layerwise prefill:" $OUT/gen_$4_$2_th$3_$5.txt | grep -v "prepare weight" | sed 's/.*layerwise prefill:/layerwise prefill:/' | cut -c1-200 | sed "s/^/$4 $2 th$3: /" | tee -a $L; }
for T in 4096 8192; do
  P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range($T)))")
  echo "== $T tokens ($SECONDS s)" | tee -a $L
  gen kt $T 0 C 0; gen kt $T 0 C 1
  for i in 1 2 3; do
    if [ $((i % 2)) = 1 ]; then gen kt $T 1024 N $i; gen kt_old $T 1024 O $i; else gen kt_old $T 1024 O $i; gen kt $T 1024 N $i; fi
  done
  [ $SECONDS -lt 420 ] || break
done
echo "end $SECONDS s" | tee -a $L
