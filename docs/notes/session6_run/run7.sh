#!/bin/bash
# session 6 call 7 (final main): the AMX prefill kernel knobs again on today's engine (per-item gather, in-place
# rows, next-call prefetch), Qwen3-30B AMXBF16 at 4096 tokens, five rounds in rotating order: the default,
# --amx-kblock 8, --amx-kblock 16, --amx-variant 1, --amx-prefetch-tiles 3 (A and B).
set -o pipefail
C=$PWD/.carry/s6c7; D=/tmp/b; mkdir -p $D
xz -dc $C/kt.xz > $D/kt; chmod +x $D/kt
L=$OUT/log.txt
V=("def" "kb8 --amx-kblock 8" "kb16 --amx-kblock 16" "var1 --amx-variant 1" "pfAB --amx-prefetch-tiles 3")
for i in 0 1 2 3 4; do
  for j in 0 1 2 3 4; do
    set -- ${V[$(( (i + j) % 5 ))]}; n=$1; shift
    [ $SECONDS -gt 420 ] && break
    timeout 30 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 300ms --phases "$@" 2>&1 | grep -E "^AMXBF16" | sed "s/^/$i $n /" | tee -a $L
  done
done
for v in def kb8 kb16 var1 pfAB; do
  ms=$(grep " $v AMXBF16 .*bf16 decode" $L | awk '{print $5}' | sort -n | tr '\n' ' ')
  echo "$v: $ms" | awk '{n=NF-1; printf "%s median %s ms of %d:", $1, $(int((n+1)/2)+1), n; for(i=2;i<=NF;i++) printf " %s", $i; print ""}' | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
