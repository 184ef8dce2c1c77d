#!/bin/bash
# pgraph device run: GPU tests of the hybrid step's graph forms, the 8-layer synthetic Qwen3.5 checkpoint,
# then kt generate AMXINT4 hybrid batch 1 alternating main's kt (old) and this branch's (new: piecewise graphs
# by default; KT_HYBRID_GRAPH=0: op by op; D=4) three times; a CPU profile of one new run. Results in $OUT.
set -o pipefail
R=$(pwd); B=/tmp/kb; O=/tmp/res; T0=$(date +%s)
mkdir -p $B $O; for f in kt kt.old qwen3next.test cuda.test cpu.test; do gunzip -c $R/.carry/pgraph/$f.gz > $B/$f; chmod +x $B/$f; done
log() { echo "== $(date +%T) +$(( $(date +%s) - T0 ))s $*"; }
log start; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cd $R/models/qwen3next && timeout 90 $B/qwen3next.test -test.v -test.run '^(TestHybridMatchesCPU|TestHybridGraphDecode|TestHybridDeferral)$' > $O/tests.txt 2>&1; echo "tests rc=$?")
grep -E '^(\s*--- |FAIL|ok|PASS|panic)|RESULT|vs op by op|worst logprob|decode graphs|hybrid_graph_test|deferral_test' $O/tests.txt | grep -v ': cpuexperts\|: backend' | cut -c1-260 | tail -60
EV=""
if grep -q -- '--- FAIL: TestHybridGraphDecode/piecewise,_no_GPU' $O/tests.txt && grep -q -- '--- PASS: TestHybridGraphDecode/piecewise,_event_after' $O/tests.txt; then EV=after; echo "event node form failed, event after launch passed: benchmarks use KT_HYBRID_PGRAPH_EVENT=after"; fi
log synth
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 80 $B/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1
sync; sleep 1
log StreamRead; timeout 15 $B/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream'
A="generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --json"
one() { # name binary env extra-flags
  env $3 KT_HYBRID_PGRAPH_EVENT=$EV timeout 30 $B/$2 $A $4 > $O/$1.json 2> $O/$1.err; rc=$?
  echo "$1 rc=$rc $(grep -oE '"decode_tokens_per_second": [0-9.]*' $O/$1.json) | $(grep -oE '[0-9]+ captured.*Forward' $O/$1.err | head -1) | $(grep -oE 'of which [0-9.]+ ms on the host' $O/$1.err) | ids $(grep -A3 output_ids $O/$1.json | tr -d ' \n' | cut -c1-40)"
  grep -E 'rror|panic|capture failed' $O/$1.err | head -3
}
for rep in 1 2 3; do
  [ $(( $(date +%s) - T0 )) -gt 225 ] && { log "time: stopping reps"; break; }
  log rep $rep
  one old_r$rep kt.old "X=1" ""
  P=""; [ $rep = 3 ] && P="--cpuprofile $O/new_cpu.prof"
  one new_r$rep kt "X=1" "$P"
  one op_r$rep kt "KT_HYBRID_GRAPH=0" ""
  one newd4_r$rep kt "X=1" "--kt-max-deferred-experts-per-token 4"
  one oldd4_r$rep kt.old "X=1" "--kt-max-deferred-experts-per-token 4"
  tar czf $OUT/res.tgz -C /tmp res
done
grep -h 'routed experts:' $O/new_r1.err | cut -c1-400
log StreamRead; timeout 15 $B/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream'
cp $O/tests.txt $OUT/ 2>/dev/null; tar czf $OUT/res.tgz -C /tmp res
log end
