#!/bin/bash
# session 7 call 2 (main at 1564064: bf16 per-slot outputs, whole-expert items in gate/up and down, kt bench's
# default 16 workers): engine tests on real AMX; A/B/C at Qwen3-30B 4096 tokens, 15 workers, rotating order,
# 8 rounds: N = default, S = --split-items (bf16 outputs only), O = as session 6 (--split-items
# --slot-outputs-f32); then the full 5-round tables against PyTorch at the default (16 workers), and
# Qwen3-30B at 4096 tokens with 15 workers.
set -o pipefail
C=$PWD/.carry/s7c2; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 240 $D/moe.test -test.run 'TestSlotOutputs|TestWholeItems|TestMethodsAgainst|TestFused|TestDetermin|TestLoRA' 2>&1 | tail -3) | tee -a $L
ab() { echo "== round $1 $2 ($SECONDS s)" | tee -a $L; timeout 40 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 300ms --cpuinfer 15 --phases $3 2>&1 | grep -E "^AMX" | sed "s/^/$2 /" | tee -a $L; }
for i in 1 2 3 4 5 6 7 8; do
  case $((i % 3)) in
    1) ab $i N ""; ab $i S "--split-items"; ab $i O "--slot-outputs-f32 --split-items";;
    2) ab $i S "--split-items"; ab $i O "--slot-outputs-f32 --split-items"; ab $i N "";;
    0) ab $i O "--slot-outputs-f32 --split-items"; ab $i N ""; ab $i S "--split-items";;
  esac
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m ($SECONDS s)" | tee -a $L
  timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "== ratio 15 workers ($SECONDS s)" | tee -a $L
[ $SECONDS -lt 520 ] && timeout 75 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases --cpuinfer 15 --json $OUT/ratio_15.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
