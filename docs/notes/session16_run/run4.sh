#!/bin/bash
# Session 16, call 4: the prefetch default, alternated four times on one host (call 3's hosts moved 1.0-1.4 ms of
# CPU experts per step between runs): hybrid decode of the 8-layer synthetic Qwen3.5 (D = 0 and 4) and Qwen3-30B
# (D = 0), KT_HYBRID_PREFETCH=owned (default) against 0; greedy ids compared (stdout). Then the engine alone with a
# 70 us gap, no prefetch against an owned prefetch of the right experts, alternated three times.
set -o pipefail
C=$PWD/.carry/s16; D=/tmp/b; mkdir -p $D
for f in kt_new qwen3next.test qwen3moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L
KT_SYNTH_OUT=/tmp/q3 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3moe.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
echo "synth $SECONDS s" | tee -a $L
gen() { local tag=$1 m=$2; shift 2
  timeout 100 $D/kt_new generate --model-path $m --input-ids 615,892,721,286,283,347,17,99 --ignore-eos --device cuda --max-new-tokens 256 \
    --kt-weight-path $m --kt-method AMXINT4 --kt-cpuinfer 15 "$@" > $D/out.txt 2> $D/err.txt
  echo "$tag ids $(md5sum < $D/out.txt | cut -c1-8)" | tee -a $L
  grep -E 'hand-off|new tokens|prefetch \(' $D/err.txt | grep -v 'routed experts:' | sed -E 's/8 prompt tokens in [^,]*, //; s/\(µs per MoE layer [0-9 ]*\)//g' | cut -c1-250 | sed "s/^/$tag: /" | tee -a $L; }
for r in 1 2 3 4; do
  for p in owned 0; do
    KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "q35 D0 $p r$r" /tmp/q35
    KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "q35 D4 $p r$r" /tmp/q35 --kt-max-deferred-experts-per-token 4
    KT_HYBRID_PREFETCH=$p KT_HYBRID_TIMING=1 gen "q3 D0 $p r$r" /tmp/q3
  done
done
echo "gen $SECONDS s" | tee -a $L
for r in 1 2 3; do
  for a in "-1" "1 --owned-decode"; do
    timeout 60 $D/kt_new bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4 --tokens 1 --min-time 300ms --gap 70us --f32-io \
      --cpuinfer 15 --prefetch-hit $a 2>&1 | grep -E '^AMXINT4|^prefetch' | cut -c1-100 | sed "s/^/r$r hit $a: /" | tee -a $L
  done
done
echo "end $SECONDS s" | tee -a $L
