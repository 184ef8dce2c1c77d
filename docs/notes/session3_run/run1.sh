#!/bin/bash
# coordinator session 3: AMX test crash hunt, merged-main engine table, sync-help A/B, hybrid decode
set -o pipefail
C=.carry/coord3; D=/tmp/b; mkdir -p $D
for f in moe.test qwen3next.test; do gunzip -c $C/$f.gz > $D/$f; chmod +x $D/$f; done
cp $C/kt $D/kt; chmod +x $D/kt
echo "== tests $(date +%T)"
for t in TestAMXCoreEmulated TestKernelBenchHarness TestTileLayout TestAMXKBlockBitwise TestMethodsAgainstReference TestFusedMatchesPhased TestDeterministicAcrossThreadCounts TestSyncHelpBitwise TestHostTaskF32 TestLoRAAgainstReference TestAsyncQueueIncrementalBF16 TestBuffersFromForeignThread TestSkipMaskAndBadIDs; do
  echo "== $t $(date +%T)"; timeout 90 $D/moe.test -test.v -test.run "^$t\$" > $D/t.log 2>&1; rc=$?; tail -4 $D/t.log; echo "rc=$rc"
done
echo "== table $(date +%T)"
timeout 150 $D/kt bench --type moe --methods AMXINT4,AMXINT8,AMXBF16,BF16 --tokens 1,4096 --min-time 200ms --compare-torch 2>&1 | grep -vE '^#' | cut -c1-160
echo "== 30b 4096 reps $(date +%T)"
for i in 1 2; do for v in "" "--amx-prefetch-tiles 3"; do echo "== [$v]"; timeout 40 $D/kt bench --type moe --model qwen3-30b-a3b --methods AMXBF16,AMXINT8 --tokens 4096 --min-time 300ms --compare-torch $v 2>&1 | grep -E '^(AMX|read)' | cut -c1-150; done; done
echo "== sync-help $(date +%T)"
for i in 1 2; do for v in "" "--sync-help"; do echo "== [$v]"; timeout 30 $D/kt bench --type moe --model qwen3.5-35b-a3b --methods AMXINT4,AMXINT8 --tokens 1 --min-time 300ms $v 2>&1 | grep -E '^(AMX|read)' | cut -c1-120; done; done
echo "== synth $(date +%T)"
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 120 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -2; sync
for i in 1 2; do for d in 0 4; do echo "== generate D=$d $(date +%T)"; timeout 40 $D/kt generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --kt-max-deferred-experts-per-token $d 2>&1 | grep -iE "tok/s|forward|graph|host" | cut -c1-200; done; done
echo "== end $(date +%T)"
