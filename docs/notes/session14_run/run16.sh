#!/bin/bash
# session 14 call 16: after the review (Device.CopyHost holds the hand-off's kernel-or-copy-engine choice and the
# range checks; launch takes a kernel's handle, parameter count and early-launch flag from one cached entry): every
# CUDA test, the qwen3next hybrid tests with KT_HYBRID_COPY kernel and memcpy, hybrid decode ids in both forms.
set -o pipefail
C=$PWD/.carry/s14c16; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd backend/cuda && timeout 300 $D/cuda.test -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL)|^(PASS|FAIL|ok)|panic' | tee $D/c.txt | grep -v -- '--- PASS' | tee -a $L; echo "cuda: passed $(grep -c -- '--- PASS' $D/c.txt), failed $(grep -c -- '--- FAIL' $D/c.txt)" | tee -a $L)
for m in kernel memcpy; do
(cd models/qwen3next && KT_HYBRID_COPY=$m timeout 200 $D/qwen3next.test -test.run 'Hybrid|Layerwise' -test.v 2>&1 | grep -E -- '^--- (PASS|FAIL)|^(PASS|FAIL|ok)|panic' | sed "s/^/$m: /" | tee -a $L)
done
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
for m in kernel memcpy; do
  KT_HYBRID_COPY=$m timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 128 --json \
    --kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15 > $D/g.json 2>/dev/null
  python3 -c "import json,sys,hashlib; d=json.load(open(sys.argv[1])); print(hashlib.md5(str(d['output_ids']).encode()).hexdigest()[:12], round(d['decode_tokens_per_second'],1))" $D/g.json | sed "s/^/$m ids tok\/s: /" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
