#!/bin/bash
# session 13 call 1: gated pieces (the next piece launched before the hand-off, waiting on a pinned word; the
# hand-off waiting on a word the piece sets). GPU tests; hybrid decode with gates on and off (KT_CUDA_PIECE_GATES=0)
# alternated, greedy D = 0 and 4; ncu of the hybrid step's GPU kernels op by op.
set -o pipefail
C=$PWD/.carry/s13c1; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test cpu.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
echo "== GPU tests" | tee -a $L
(cd backend/cuda && timeout 120 $D/cuda.test -test.run 'TestGatedPieces|TestStreamsEventsHostFunc|TestGraphDecodeStep' -test.v 2>&1 \
  | grep -E '^(--- |PASS|FAIL|ok|panic)|error|gated|ready' | head -40 | tee -a $L)
(cd models/qwen3next && timeout 400 $D/qwen3next.test -test.run 'TestHybridGraphDecode|TestHybridMatchesCPU' -test.v 2>&1 \
  | grep -E '^(\s*--- |PASS|FAIL|ok|panic)|gated|error' | cut -c1-300 | head -60 | tee -a $L)
echo "== synth ($SECONDS s)" | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
probe() { $D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead" | tee -a $L; }
H="--kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4"
gen() { local name=$1; shift
  KT_HYBRID_TIMING=1 timeout 90 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 $H "$@" 2>&1 \
    | grep -iE "tok/s|hand-off|error|piecewise" | cut -c1-330 | sed "s/^/$name: /" | tee -a $L; }
gen warm --max-new-tokens 4 >/dev/null
probe
for r in 1 2 3; do
  for d in 0 4; do
    gen "gates D$d" --kt-max-deferred-experts-per-token $d
    KT_CUDA_PIECE_GATES=0 gen "nogates D$d" --kt-max-deferred-experts-per-token $d
  done
  probe
done
echo "== ids equal, gates on/off ($SECONDS s)" | tee -a $L
for g in 1 0; do KT_CUDA_PIECE_GATES=$g timeout 90 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 64 $H --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(str(t['id']) for t in d['output']))" > $D/ids$g.txt; done
cmp $D/ids1.txt $D/ids0.txt && echo "ids identical ($(wc -w < $D/ids1.txt))" | tee -a $L
echo "== ncu hybrid op by op ($SECONDS s)" | tee -a $L
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 3 $H --disable-cuda-graph > $OUT/ncu_hybrid.csv 2> $OUT/ncu_hybrid.err; echo rc=$? | tee -a $L; wc -l $OUT/ncu_hybrid.csv | tee -a $L
echo "end $SECONDS s" | tee -a $L
