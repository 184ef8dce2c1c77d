#!/bin/bash
# session 5 call 6: the engine tests on real AMX for the per-item gather (branch localgather + amxemu);
# old (main eb1eeab, slot-ordered gather phase) vs new alternated at 4096 tokens with --phases.
set -o pipefail
C=$PWD/.carry/s5c6; D=/tmp/b; mkdir -p $D
for f in kt kt.old moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
(cd moe/cpuexperts && timeout 300 $D/moe.test -test.run 'TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestTileLayout|TestLoRA|TestAMXEmul|TestSyncHelp|TestHostTask' 2>&1 | tail -5)
for i in 1 2 3; do for b in kt.old kt; do echo "== $b qwen3-30b"; timeout 100 $D/$b bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8,AMXINT4 --tokens 4096 --min-time 300ms --phases 2>&1 | grep -E "^AMX|read bandwidth"; done; done
for i in 1 2; do for b in kt.old kt; do echo "== $b qwen3.5"; timeout 100 $D/$b bench --type moe --model qwen3.5-35b-a3b --methods AMXBF16,AMXINT8,AMXINT4 --tokens 4096 --min-time 300ms --phases 2>&1 | grep -E "^AMX|read bandwidth"; done; done
