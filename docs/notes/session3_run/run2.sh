#!/bin/bash
set -o pipefail
D=/tmp/b; mkdir -p $D
gunzip -c .carry/coord3/moe.test.gz > $D/moe.test; chmod +x $D/moe.test
echo "== combined tests $(date +%T)"
for i in 1 2; do
timeout 90 $D/moe.test -test.v -test.run 'TestFused|TestMethodsAgainst|TestDetermin|TestKBlock|TestAMXCore|TestTileLayout|TestKernelBench' > $D/c.log 2>&1; echo "rc=$?"; grep -E "^(=== RUN|--- (PASS|FAIL))" $D/c.log | grep -v "/" | tail -6; tail -3 $D/c.log
done
echo "== all tests $(date +%T)"
timeout 150 $D/moe.test -test.v > $D/a.log 2>&1; echo "rc=$?"; grep -E "^(=== RUN|--- (PASS|FAIL))" $D/a.log | grep -v "/" | tail -4; tail -3 $D/a.log
echo "== torch $(date +%T)"
python3 .carry/coord4/torchvar.py 2048 512 256 8
python3 .carry/coord4/torchvar.py 2048 768 128 8
echo "== end $(date +%T)"
