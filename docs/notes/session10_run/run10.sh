#!/bin/bash
# session 10 call 10: layerwise upload with grouped staging (64 MiB pinned slots filled by one parallel copy over a
# group of experts; before: one-expert slots, each 2 MiB matrix copied on at most 2 goroutines). The layerwise GPU
# tests, then the 8-layer synthetic Qwen3.5 checkpoint: kt generate at 4096 and 8192 tokens, AMXINT4 CPU method,
# --kt-gpu-prefill-token-threshold 1024 (layerwise) and 0 (CPU AMX prefill), new (N) and old (O) binaries
# alternating.
set -o pipefail
C=$PWD/.carry/s10c10; D=/tmp/b; mkdir -p $D
for f in kt kt_old qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 240 $D/qwen3next.test -test.run '^(TestLayerwisePrefill|TestDynamicExpertUpdate)$' -test.v 2>&1 | grep -E "^(--- |=== RUN|PASS|FAIL|ok)" | grep -v "=== RUN" | tail -8) | tee -a $L
(cd models/qwen3next && KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1) | tee -a $L; sync
gen() { timeout 120 $D/$1 generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 4 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --chunked-prefill-size $2 --kt-gpu-prefill-token-threshold $3 2>&1 | grep -iE "prompt tokens|layerwise" | grep -v "prepare weight" | cut -c1-300 | sed "s/^/$4 $2 th$3: /" | tee -a $L; }
for T in 4096 8192; do
  P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range($T)))")
  echo "== $T tokens ($SECONDS s)" | tee -a $L
  gen kt $T 0 N
  for i in 1 2 3; do
    if [ $((i % 2)) = 1 ]; then gen kt $T 1024 N; gen kt_old $T 1024 O; else gen kt_old $T 1024 O; gen kt $T 1024 N; fi
  done
  [ $SECONDS -lt 400 ] || break
done
echo "end $SECONDS s" | tee -a $L
