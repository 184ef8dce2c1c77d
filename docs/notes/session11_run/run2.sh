#!/bin/bash
# session 11 call 2 (main at e7ea21d): the full 5-round tables of both shapes with the new tile probe
# (kt bench samples the all-core 2x2 L1-reload tile loop before every prefill row), and the tile
# probe's own tests on real AMX.
set -o pipefail
C=$PWD/.carry/s11c2; D=/tmp/b; mkdir -p $D
for f in kt moe.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd moe/cpuexperts && timeout 60 $D/moe.test -test.run 'TestTileProbe|TestTileFormat' -test.v 2>&1 | grep -E "^(---|ok|FAIL|PASS|panic)") | tee -a $L
for m in qwen3-30b-a3b qwen3.5-35b-a3b; do
  echo "== table $m ($SECONDS s)" | tee -a $L
  timeout 230 $D/kt bench --type moe --model $m --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4,32,512,4096 --min-time 200ms --rounds 5 --compare-torch --phases --json $OUT/table_$m.json 2>&1 | grep -vE "^\s*$|^#" | tee -a $L
done
echo "end $SECONDS s" | tee -a $L
