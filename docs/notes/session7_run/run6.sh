#!/bin/bash
# session 7 call 6 (main with the shorter caller spin where every CPU has a worker): engine tests on real AMX;
# A/B at 16 workers (kt bench's default), N = default (the caller spins 1 ms longer than the workers, then
# sleeps) vs X = --sync-spin 5ms (as before), AMXINT8 and AMXBF16 at 1 and 4096 tokens, both shapes,
# 6 rounds alternating; then the full 5-round tables at the default.
set -o pipefail
C=$PWD/.carry/s7c6; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestSlotOutputs|TestWholeItems|TestSiLU|TestMethodsAgainst|TestFused|TestDetermin|TestSyncHelp|TestHostTask' 2>&1 | tail -3) | tee -a $L
ab() { timeout 40 $D/kt bench --type moe --model $3 --methods AMXINT8,AMXBF16 --tokens 1,4096 --min-time 300ms $4 2>&1 | grep -E "^AMX" | sed "s/^/$2 $3 /" | tee -a $L; }
for i in 1 2 3 4 5 6; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    if [ $((i % 2)) = 1 ]; then ab $i N $m ""; ab $i X $m "--sync-spin 5ms"; else ab $i X $m "--sync-spin 5ms"; ab $i N $m ""; fi
  done
done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do for me in AMXINT8 AMXBF16; do for t in 1 4096; do
  for c in N X; do echo -n "$m $me $t $c: " | tee -a $L; grep "^$c $m $me " $L | awk -v t=$t '$4==t{print $5}' | sort -n | tr '\n' ' ' | tee -a $L; echo | tee -a $L; done
done; done; done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m ($SECONDS s)" | tee -a $L
  [ $SECONDS -lt 400 ] && timeout 200 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
