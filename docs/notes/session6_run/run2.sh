#!/bin/bash
# session 6 call 2: the phased down/merge variants at 512 and 4096 tokens, both shapes, four rounds alternated:
# old (014223f) | new --merge-blocks -1 (old down/merge, bf16 x in place) | new default (3 blocks, around the caches)
# | new --merge-blocks 8 (every block kept: no waits) | new --merge-blocks 3 --merge-cached; then the tests on real
# AMX, one-token traces of AMXINT4/AMXINT8 on Qwen3-30B, and both shapes against PyTorch.
set -o pipefail
C=$PWD/.carry/s6c2; D=/tmp/b; mkdir -p $D
for f in kt kt_old moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
for i in 1 2 3 4; do
  for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
    for v in "kt_old" "kt --merge-blocks -1" "kt" "kt --merge-blocks 8" "kt --merge-cached"; do
      set -- $v; b=$1; shift
      [ $SECONDS -gt 400 ] && break
      echo "== $i $m $v"; timeout 60 $D/$b bench --type moe --model $m --methods AMXBF16,AMXINT8 --tokens 512,4096 --min-time 300ms --phases "$@" 2>&1 | grep -E "^AMX"
    done
  done
done
echo "tests at $SECONDS s"
(cd moe/cpuexperts && timeout 100 $D/moe.test -test.run 'TestMergeBlocks|TestMethodsAgainst|TestFused|TestDetermin' 2>&1 | tail -2)
for i in 1 2; do echo "== trace 1 token ($SECONDS s)"; timeout 40 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT4,AMXINT8 --tokens 1 --min-time 300ms --trace 2>&1 | grep -vE "^\s*$|^#"; done
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do echo "== torch $m ($SECONDS s)"; [ $SECONDS -lt 540 ] && timeout 60 $D/kt bench --type moe --model $m --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch 2>&1 | grep -E "^AMX|read bandwidth|torch TF"; done
echo "end $SECONDS s"
