#!/bin/bash
# session 4 call 1: LoRA ISA diagnostic, decode baselines, per-kernel GPU profile (ncu) of the decode step
set -o pipefail
C=$PWD/.carry/p1; D=/tmp/b; mkdir -p $D
for f in qwen3next.test cpu.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
gunzip -c $C/kt.gz > $D/kt; chmod +x $D/kt
nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
echo "== lora isa $(date +%T)"
(cd models/qwen3next; for isa in avx2 avx512 amx; do echo "-- $isa"; KT_CPUEXPERTS_ISA=$isa KT_TESTDATA_MODELS=../../testdata/models timeout 60 $D/qwen3next.test -test.run 'TestLoRAEngineAndHybrid|TestExpertEngineMatchesReference' -test.v 2>&1 | grep -E "^(---|ok|FAIL|panic)|diff|logprob|max" | head -20; done)
echo "== synth $(date +%T)"
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 150 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1; sync
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
G="$D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda"
for i in 1 2; do
 echo "== hybrid D=0 $(date +%T)"; timeout 60 $G --max-new-tokens 64 --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 2>&1 | grep -iE "tok/s|Forward|host" | cut -c1-220
 echo "== allgpu $(date +%T)"; timeout 60 $G --max-new-tokens 64 --experts backend 2>&1 | grep -iE "tok/s|Forward|host" | cut -c1-220
done
$D/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E "StreamRead"
echo "== ncu allgpu $(date +%T)"
timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base $G --max-new-tokens 3 --experts backend --disable-cuda-graph > $OUT/ncu_allgpu.csv 2> $OUT/ncu_allgpu.err; echo rc=$?; wc -l $OUT/ncu_allgpu.csv; tail -3 $OUT/ncu_allgpu.err
echo "== end $(date +%T)"
