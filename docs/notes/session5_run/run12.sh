#!/bin/bash
# session 5 call 12: the final main's engine tests on real AMX and the hybrid model tests on the H100.
set -o pipefail
C=$PWD/.carry/s5c12; D=/tmp/b; mkdir -p $D
for f in moe.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
export KT_TESTDATA_MODELS=$PWD/testdata/models
(cd moe/cpuexperts && timeout 300 $D/moe.test -test.v -test.run 'TestMethodsAgainst|TestFused|TestDetermin|TestAMXKBlock|TestTileLayout|TestLoRA|TestAMXEmul|TestSyncHelp|TestHostTask' 2>&1 | grep -E "^(--- |PASS|FAIL|ok)" | sort | uniq -c | sort -rn | head -40)
(cd models/qwen3next && timeout 300 $D/qwen3next.test -test.v -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' 2>&1 | grep -E "^(--- |PASS|FAIL|ok)")
