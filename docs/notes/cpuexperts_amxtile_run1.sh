#!/bin/bash
# amxtile device call 1: AMX tests, kernel micro-benchmark sweep, old/new alternated at 4096 tokens.
set -o pipefail
C=.carry/amxtile; D=/tmp/b; mkdir -p $D
for f in kt kt.old moe.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|L1d|L2|L3'
echo "== tests $(date +%T)"
timeout 90 $D/moe.test -test.run 'TestFused|TestMethodsAgainst|TestDetermin|TestKBlock|TestAMXCore|TestTileLayout' 2>&1 | tail -5
echo "== kbench $(date +%T)"
timeout 80 $D/moe.test -test.run XXX -test.bench AMXKernel -test.benchtime 1x 2>&1 | grep -E 'TFLOPS|FAIL|panic|ok'
for i in 1 2 3; do for b in kt.old kt; do
  echo "== $b rep $i $(date +%T)"
  timeout 40 $D/$b bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch --phases 2>&1 | grep -E '^(AMX|read|phase)' | cut -c1-160
done; done
echo "== variants $(date +%T)"
for v in "--amx-next-lines -1" "--amx-variant 1 --amx-prefetch-tiles 1"; do
  echo "== kt $v"
  timeout 30 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms $v 2>&1 | grep -E '^(AMX|read)' | cut -c1-160
done
echo "== end $(date +%T)"
