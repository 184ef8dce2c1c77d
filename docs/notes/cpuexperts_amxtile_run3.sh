#!/bin/bash
# amxtile device call 3: AMX tests, old/new alternated at 4096 tokens (Qwen3-30B), the full table, knob A/Bs.
set -o pipefail
C=.carry/amxtile; D=/tmp/b; mkdir -p $D
for f in kt kt.old moe.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
echo "== tests $(date +%T)"
timeout 60 $D/moe.test -test.run 'TestFused|TestMethodsAgainst|TestDetermin|TestKBlock|TestAMXCore|TestTileLayout|TestKernelBench' 2>&1 | tail -3
for i in 1 2 3; do for b in kt.old kt; do
  echo "== $b rep $i $(date +%T)"
  timeout 40 $D/$b bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch 2>&1 | grep -E '^(AMX|read)' | cut -c1-150
done; done
echo "== table $(date +%T)"
timeout 130 $D/kt bench --type moe --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4096 --min-time 200ms --compare-torch 2>&1 | grep -vE '^#' | cut -c1-160
echo "== knobs $(date +%T)"
for v in "--prefill-chunk 512" "--amx-prefetch-tiles 3"; do
  echo "== kt [$v]"
  timeout 25 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms $v 2>&1 | grep -E '^(AMX|read)' | cut -c1-100
done
echo "== end $(date +%T)"
