#!/bin/bash
# Session 19, call 8: the int4 block loop shared by AMXINT4's and INT4_KGROUP's decode kernels (kt_blk: i4_block,
# several tokens now two chains a token, lo and hi apart) against the build before (kt_cur = c099b49): tests on this
# CPU, then kt bench at 1, 32 and 64 tokens (1-4 tokens per expert: the decode kernels), alternated twice.
set -o pipefail
C=$PWD/.carry/s19; D=/tmp/b; mkdir -p $D
for f in kt_cur kt_blk ce_blk.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
timeout 120 $D/ce_blk.test -test.run 'DecodeOneTokenMatchesPair|DecodePrefetchBitwise|MethodsAgainstReference|FusedMatchesPhased|Int4KGroupAMX' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|panic' | tee -a $L
echo "tests $SECONDS s" | tee -a $L
for r in 1 2; do
  for b in kt_cur kt_blk; do
    timeout 90 $D/$b bench --type moe --methods AMXINT4,INT4_KGROUP --tokens 1,32,64 --min-time 200ms 2>&1 \
      | grep -E '^(AMX|INT4|qwen|read)' | sed "s/^/r$r $b: /" | tee -a $L
  done
done
echo "end $SECONDS s" | tee -a $L
