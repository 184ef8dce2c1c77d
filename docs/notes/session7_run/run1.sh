#!/bin/bash
# session 7 call 1 (main at 42ad7a4: bf16 per-slot down outputs, whole-expert gate/up items): engine tests on real
# AMX; A/B/C at Qwen3-30B 4096 tokens in rotating order, 8 rounds: N = default, Y = bf16 outputs only
# (--gate-up-split), O = as session 6 (--slot-outputs-f32 --gate-up-split); then 5-round ratios against PyTorch:
# N at 15 and 16 threads, O at 15.
set -o pipefail
C=$PWD/.carry/s7c1; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 240 $D/moe.test -test.run 'TestSlotOutputs|TestGateUpItems|TestQuantizeRow|TestBF16InputInPlace|TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestLoRA|TestTileLayout|TestSyncHelp|TestHostTask' 2>&1 | tail -3) | tee -a $L
ab() { echo "== round $1 $2 ($SECONDS s)" | tee -a $L; timeout 40 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 300ms --phases $3 2>&1 | grep -E "^AMX" | sed "s/^/$2 /" | tee -a $L; }
for i in 1 2 3 4 5 6 7 8; do
  case $((i % 3)) in
    1) ab $i N ""; ab $i Y "--gate-up-split"; ab $i O "--slot-outputs-f32 --gate-up-split";;
    2) ab $i Y "--gate-up-split"; ab $i O "--slot-outputs-f32 --gate-up-split"; ab $i N "";;
    0) ab $i O "--slot-outputs-f32 --gate-up-split"; ab $i N ""; ab $i Y "--gate-up-split";;
  esac
done
for c in "N15|--cpuinfer 15" "O15|--cpuinfer 15 --slot-outputs-f32 --gate-up-split" "N16|--cpuinfer 16"; do
  n=${c%%|*}; a=${c#*|}
  echo "== ratio $n [$a] ($SECONDS s)" | tee -a $L
  [ $SECONDS -lt 500 ] && timeout 90 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/ratio_$n.json $a 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
