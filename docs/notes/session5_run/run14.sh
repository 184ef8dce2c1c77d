#!/bin/bash
# session 5 call 14: the engine tests on real AMX after the review commits.
set -o pipefail
D=/tmp/b; mkdir -p $D; xz -dc $PWD/.carry/s5c14/moe.test.xz > $D/moe.test; chmod +x $D/moe.test
(cd moe/cpuexperts && timeout 300 $D/moe.test -test.v -test.run 'TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestTileLayout|TestLoRA|TestSyncHelp|TestHostTask' 2>&1 | grep -E "^(--- |PASS|FAIL|ok)")
$D/moe.test -test.run XXX -test.bench 'AMXKernel/.*/peak-[345]/threads=15' -test.benchtime 1x 2>&1 | grep -E "peak|FAIL|panic"
