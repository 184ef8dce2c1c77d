#!/bin/bash
# session 14 call 3: why the hybrid step's CPU experts run slower than the engine alone (150-198 vs 117-128 us per
# layer). Same host, alternated: hybrid AMXINT4 D=0 with KT_HYBRID_TIMING=1 (per-task trace) as is, with GOGC=off,
# GOMAXPROCS=4, --kt-cpuinfer 14; GC count (gctrace); thread placement during a long decode; the engine alone at one
# token (--gap 70us, --f32-io, --trace) beside its read probe.
set -o pipefail
C=$PWD/.carry/s14c3; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
nproc | tee -a $L; lscpu | grep -E 'Thread|Core|Socket|NUMA node0|Model name' | tee -a $L
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
H="--kt-weight-path /tmp/q35 --kt-method AMXINT4"
gen() { local tag=$1; shift
  timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 "$@" > $D/gen.txt 2>&1
  grep -E 'tok/s|hand-off' $D/gen.txt | sed "s/^/$tag: /" | tee -a $L
  grep -A4 'decode tasks' $D/gen.txt | grep -E 'AMXINT4|per-thread' | cut -c1-400 | sed "s/^/$tag: /" | tee -a $L; }
engine() { timeout 120 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --rounds 3 --cpuinfer 15 --gap 70us --trace --f32-io 2>&1 \
  | grep -vE '^\s*$' | cut -c1-300 | tail -14 | sed "s/^/engine: /" | tee -a $L; }
engine
for r in 1 2; do
  KT_HYBRID_TIMING=1 gen "default r$r" $H --kt-cpuinfer 15
  KT_HYBRID_TIMING=1 GOGC=off gen "GOGC=off r$r" $H --kt-cpuinfer 15
  KT_HYBRID_TIMING=1 GOMAXPROCS=4 gen "GOMAXPROCS=4 r$r" $H --kt-cpuinfer 15
  KT_HYBRID_TIMING=1 gen "cpuinfer14 r$r" $H --kt-cpuinfer 14
done
engine
echo "== gctrace" | tee -a $L
GODEBUG=gctrace=1 timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 $H --kt-cpuinfer 15 > $D/gc.txt 2>&1
echo "gc lines: $(grep -c '^gc ' $D/gc.txt)" | tee -a $L; grep '^gc ' $D/gc.txt | tail -3 | tee -a $L
echo "== threads during a long decode" | tee -a $L
KT_HYBRID_TIMING=1 timeout 100 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 3000 $H --kt-cpuinfer 15 > $D/long.txt 2>&1 &
GP=$!
sleep 9
ps -L -o tid,psr,pcpu,stat,comm -p $GP | sort -k3 -n -r | head -30 | tee -a $L
for i in 1 2 3; do sleep 0.5; ps -L -o tid,psr,pcpu -p $GP --no-headers | awk '$3>5{print $2}' | sort -n | tr '\n' ' ' | tee -a $L; echo | tee -a $L; done
wait $GP
grep -E 'tok/s|hand-off' $D/long.txt | sed "s/^/long: /" | tee -a $L
echo "end $SECONDS s" | tee -a $L
