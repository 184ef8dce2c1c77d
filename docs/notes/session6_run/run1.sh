#!/bin/bash
# session 6 call 1 (main a5fcd94): engine tests on real AMX (with TestMergeBlocksBitwise); Qwen3-30B at 4096 tokens,
# old (014223f) vs new (down and merge interleaved, bf16 x read in place) vs new --merge-blocks -1 (the old
# down/merge, so only the in-place read differs), alternated twice, --phases; new at 16 threads; new vs PyTorch.
set -o pipefail
C=$PWD/.carry/s6c1; D=/tmp/b; mkdir -p $D
for f in kt kt_old moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
nproc; lscpu | grep -E "Model name|L3|MHz" | head -4
(cd moe/cpuexperts && timeout 200 $D/moe.test -test.run 'TestMergeBlocks|TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestLoRA|TestTileLayout' 2>&1 | tail -3)
echo "tests done at $SECONDS s"
B="bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --phases"
for i in 1 2; do
  for v in "kt_old" "kt" "kt --merge-blocks -1"; do
    set -- $v; b=$1; shift
    [ $SECONDS -gt 470 ] && break
    echo "== $v"; timeout 90 $D/$b $B "$@" 2>&1 | grep -E "^AMX|read bandwidth"
  done
done
echo "== kt --cpuinfer 16 ($SECONDS s)"; [ $SECONDS -lt 480 ] && timeout 60 $D/kt $B --cpuinfer 16 2>&1 | grep -E "^AMX"
echo "== kt --compare-torch ($SECONDS s)"; [ $SECONDS -lt 500 ] && timeout 95 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch 2>&1 | grep -E "^AMX|read bandwidth|torch TF"
echo "end $SECONDS s"
