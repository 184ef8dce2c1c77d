#!/bin/bash
# session 10 call 1 (main at a506fd2): engine tests on real AMX (the per-block amx_kch of 143039a); then gate/up
# K blocking alone at engine level, Qwen3-30B, AMXINT8 + AMXBF16 at 4096 tokens, 6 rounds, variants rotated:
#   D   default (no K blocking, prefetch B tiles)
#   K8 / K16 / K32  --amx-kblock N --amx-kblock-down -1 --amx-prefetch-tiles 1 (gate/up blocked, B pair in L1,
#                   prefetch the A tiles only; down unblocked)
#   K16B            --amx-kblock 16 --amx-kblock-down -1 (B prefetch as default)
# the gate/up phase medians decide; then 5-round --compare-torch ratios at 4096 tokens, D against the best
# variant when its AMXBF16 gate/up median is >= 3 % below D's (else D alone), three times alternating.
set -o pipefail
C=$PWD/.carry/s10c1; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
lscpu | grep -E "Model name|MHz|Thread|L2" | tee -a $L
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestAMXKBlockBitwise|TestDownKernelRounds|TestSlotOutputs|TestMethodsAgainst|TestDetermin|TestAMXCore' 2>&1 | tail -3) | tee -a $L
declare -A F=([D]="" [K8]="--amx-kblock 8 --amx-kblock-down -1 --amx-prefetch-tiles 1"
  [K16]="--amx-kblock 16 --amx-kblock-down -1 --amx-prefetch-tiles 1"
  [K32]="--amx-kblock 32 --amx-kblock-down -1 --amx-prefetch-tiles 1" [K16B]="--amx-kblock 16 --amx-kblock-down -1")
V=(D K8 K16 K32 K16B)
m=qwen3-30b-a3b
ab() { timeout 40 $D/kt bench --type moe --model $m --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 300ms --phases ${F[$2]} 2>&1 | grep -E "^AMX" | sed "s/^/$2 $m $1 /" | tee -a $L; }
for i in 1 2 3 4 5 6; do
  echo "== round $i ($SECONDS s)" | tee -a $L
  for j in 0 1 2 3 4; do ab $i ${V[$(( (i + j) % 5 ))]}; done
done
med() { sort -n | awk '{a[NR]=$1} END{print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2}'; }
best=D; bestg=1e9
for c in ${V[@]}; do for meth in AMXINT8 AMXBF16; do
  v=$(awk -v c=$c -v k=$meth '$1==c && $4==k && $5==4096 && $8 ~ /%$/ {print $6}' $L | med)
  g=$(awk -v c=$c -v k=$meth '$1==c && $4==k && $5==4096 && NF==13 {print $9}' $L | med)
  dn=$(awk -v c=$c -v k=$meth '$1==c && $4==k && $5==4096 && NF==13 {print $11}' $L | med)
  echo "median $c $meth: total $v, gate/up $g, down $dn" | tee -a $L
  if [ $meth = AMXBF16 ]; then
    [ $c = D ] && dg=$g
    if awk -v a=$g -v b=$bestg 'BEGIN{exit !(a<b)}'; then best=$c; bestg=$g; fi
  fi
done; done
awk -v a=$bestg -v d=$dg 'BEGIN{exit !(a<=0.97*d)}' || best=D
echo "best AMXBF16 gate/up: $best ($bestg vs D $dg)" | tee -a $L
R=(D); [ $best != D ] && R=(D $best)
for r in 1 2 3; do
  for c in ${R[@]}; do
    echo "== ratios $r $c ($SECONDS s)" | tee -a $L
    [ $SECONDS -lt 540 ] && timeout 60 $D/kt bench --type moe --model $m --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases ${F[$c]} --json $OUT/ratio${r}_$c.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
  done
  R=($(printf '%s\n' ${R[@]} | tac))
done
echo "end $SECONDS s" | tee -a $L
