#!/bin/bash
# amxtile device call 2: AMX tests, kernel micro-benchmark sweep, engine knob sweep, old/new alternated.
set -o pipefail
C=.carry/amxtile; D=/tmp/b; mkdir -p $D
for f in kt kt.old moe.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
echo "== tests $(date +%T)"
timeout 60 $D/moe.test -test.run 'TestFused|TestMethodsAgainst|TestDetermin|TestKBlock|TestAMXCore|TestTileLayout|TestKernelBench' 2>&1 | tail -3
echo "== kbench $(date +%T)"
timeout 70 $D/moe.test -test.run XXX -test.bench AMXKernel -test.benchtime 1x 2>&1 | grep -vE '^(goos|goarch|pkg|cpu):' | sed 's/BenchmarkAMXKernel\///' | cut -c1-140
echo "== knobs $(date +%T)"
for v in "" "--amx-kblock 8 --amx-prefetch-tiles 1" "--amx-kblock 16 --amx-prefetch-tiles 1 --prefill-chunk 128" "--amx-prefetch -1" "--amx-prefetch-tiles 2"; do
  echo "== kt [$v]"
  timeout 30 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms $v 2>&1 | grep -E '^(AMX|read)' | cut -c1-100
done
for i in 1 2; do for b in kt.old kt; do
  echo "== $b rep $i $(date +%T)"
  timeout 40 $D/$b bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch 2>&1 | grep -E '^(AMX|read)' | cut -c1-150
done; done
echo "== end $(date +%T)"
