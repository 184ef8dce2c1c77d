#!/bin/bash
# session 11 call 10: the first MoE layer of a sampled decode step runs 70-110 us slower than the others (calls 8-9):
# the gap between two steps (lm head, read-back, the sampler: ~0.55 ms) outlasts the engine threads' 0.5 ms spin, so
# they sleep and the first task pays a futex wake-up of 15 threads. A/B of the spin budget (KT_CPUEXPERTS_SPIN_WAIT,
# new): default (0.5 ms), 1.5 ms, 3 ms; hybrid AMXINT4 D = 0, 8-layer Qwen3.5 greedy and sampled (t = 1), 8-layer
# Qwen3-30B sampled; rotated twice.
set -o pipefail
C=$PWD/.carry/s11c10; D=/tmp/b; mkdir -p $D
for f in kt qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
one() { local sw=$1 m=$2 name=$3; shift 3
  KT_CPUEXPERTS_SPIN_WAIT=$sw KT_HYBRID_TIMING=1 timeout 90 $D/kt generate --model-path /tmp/$m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 --kt-weight-path /tmp/$m --kt-cpuinfer 15 --kt-method AMXINT4 "$@" 2>&1 | grep -iE "tok/s|hand-off|error" | sed -E 's/.*in the CPU experts/CPU experts/; s/8 prompt tokens.*decode/decode/; s/, finish.*//' | cut -c1-160 | sed "s/^/$sw $m $name: /" | tee -a $L; }
one "" q35 warm --max-new-tokens 4 >/dev/null; one "" q3 warm --max-new-tokens 4 >/dev/null
for r in 1 2; do
  for sw in "" 1.5ms 3ms; do
    one "$sw" q35 greedy
    one "$sw" q35 t1 --temperature 1 --seed 7
    one "$sw" q3 t1 --temperature 1 --seed 7
  done
done
echo "end $SECONDS s" | tee -a $L
