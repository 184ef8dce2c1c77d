#!/bin/bash
# session 10 call 12: call 11's grouped MoE path made 8192-token layerwise prefill faster but 4096-token slower: the
# op reads the expert counts back (a sync) and queues ~1500 GEMMs on the host thread that also copies the next
# layer's weights. Now (A) that copy runs on its own goroutine, started before this layer's MoE. Layerwise tests
# (also under -race), then kt generate as call 11, A against G (call 11's binary; call 11 has G against the per-pair
# kernels), alternating; log lines only (call 11 lost its log to the file count).
set -o pipefail
C=$PWD/.carry/s10c12; D=/tmp/b; mkdir -p $D
for f in kt kt_g qwen3next.test qwen3next_race.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
for b in qwen3next.test qwen3next_race.test; do
  (cd models/qwen3next && KT_TESTDATA_MODELS=$PWD/../../testdata/models timeout 200 $D/$b -test.run '^(TestLayerwisePrefill|TestDynamicExpertUpdate)$' -test.v 2>&1 | grep -E "^(--- |PASS|FAIL|ok)|DATA RACE" | tail -6 | sed "s/^/$b: /") | tee -a $L
done
(cd models/qwen3next && KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 200 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1) | tee -a $L; sync
gen() { timeout 120 $D/$1 generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 8 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --chunked-prefill-size $2 --kt-gpu-prefill-token-threshold $3 2>&1 | grep -iE "prompt tokens|layerwise prefill: [0-9]" | sed 's/.*layerwise prefill:/layerwise prefill:/' | cut -c1-160 | sed "s/^/$4 $2 th$3: /" | tee -a $L; }
for T in 4096 8192; do
  P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range($T)))")
  echo "== $T tokens ($SECONDS s)" | tee -a $L
  gen kt $T 0 C
  for i in 1 2 3; do
    if [ $((i % 2)) = 1 ]; then o="kt:A kt_g:G"; else o="kt_g:G kt:A"; fi
    for x in $o; do gen ${x%%:*} $T 1024 ${x##*:}; done
  done
  [ $SECONDS -lt 400 ] || break
done
echo "end $SECONDS s" | tee -a $L
