#!/bin/bash
# Session 19, call 1: (a) the engine tests that session 18 ran only on emulated tiles (fused-first, the INT4_KGROUP
# table lookup) on real AMX; (b) BenchmarkIntFewRows with the lookup variant; (c) INT4_KGROUP with the table lookup
# (--amx-int4-group-lut 1) against the multiplying requantization (0), alternated three times at 256-2048 tokens;
# (d) INT4_KGROUP fused-first (--amx-int4-fused-first 1 against -1) with the lookup on, alternated twice;
# (e) issue 7's 4096-token target row on this host.
set -o pipefail
C=$PWD/.carry/s19; D=/tmp/b; mkdir -p $D
for f in kt cpuexperts.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|MHz|Flags' | sed 's/Flags:.*\(avx512_vbmi \).*/VBMI present/' | tee -a $L
timeout 200 $D/cpuexperts.test -test.run 'AMXInt4Fused|Int4GroupLUT|AMXKBlock|Int4KGroupAMX|DecodePrefetch|TileFormat|RealShape' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|rel|panic' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
timeout 90 $D/cpuexperts.test -test.run XXX -test.bench 'IntFewRows' -test.benchtime 1x -test.count 2 2>&1 | grep Benchmark | tee -a $L
echo "fewrows $SECONDS s" | tee -a $L
for r in 1 2 3; do
  for lut in 0 1; do
    timeout 60 $D/kt bench --type moe --methods INT4_KGROUP --tokens 256,512,1024,2048 --min-time 200ms --amx-int4-group-lut $lut 2>&1 \
      | grep -E '^(INT4|read)' | sed "s/^/r$r lut$lut: /" | tee -a $L
    echo "r$r lut$lut $SECONDS s" | tee -a $L
  done
done
for r in 1 2; do
  for ff in -1 1; do
    timeout 45 $D/kt bench --type moe --methods INT4_KGROUP --tokens 1024,2048 --min-time 200ms --amx-int4-group-lut 1 --amx-int4-fused-first $ff 2>&1 \
      | grep -E '^(INT4|read)' | sed "s/^/r$r lut1 first$ff: /" | tee -a $L
    echo "r$r first$ff $SECONDS s" | tee -a $L
  done
done
timeout 120 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms --rounds 5 --compare-torch --phases 2>&1 | grep -v "^#" | tee -a $L
echo "end $SECONDS s" | tee -a $L
