#!/bin/bash
# deferral device run 2: TestHybridDeferral, synthetic 8-layer Qwen3.5, then kt generate AMXINT4 hybrid:
# main's binary (D=0) and this branch's with D = 0,1,2,4, alternated 3 times; results tarred into $OUT/res.tgz.
set -o pipefail
R=$(pwd); B=/tmp/kb; O=/tmp/res
mkdir -p $B $O; for f in kt kt-main qwen3next.test cpu.test; do gunzip -c $R/.carry/deferral/$f.gz > $B/$f; chmod +x $B/$f; done
log() { echo "== $(date +%T) $*"; }
log start; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cd $R/models/qwen3next && timeout 60 $B/qwen3next.test -test.v -test.run '^TestHybridDeferral$' > $O/tests.txt 2>&1; echo "rc=$?")
grep -E '^(\s*--- |FAIL|ok|PASS)|deferral_test' $O/tests.txt | grep -v ': cpuexperts\|: backend' | cut -c1-240 | tail -30
log synth
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 80 $B/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1
sync; sleep 2
log StreamRead; timeout 15 $B/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream'
A="generate --model-path /tmp/q35 --input-ids 615,892,721,286,283,347,17,99 --max-new-tokens 64 --ignore-eos --device cuda --kt-weight-path /tmp/q35 --kt-cpuinfer 15 --kt-method AMXINT4 --json --top-logprobs 5"
one() { # name binary D
  F=""; [ "$3" != "-" ] && F="--kt-max-deferred-experts-per-token $3"
  timeout 30 $B/$2 $A $F > $O/$1.json 2> $O/$1.err; rc=$?
  echo "$1 rc=$rc $(grep -oE '"decode_tokens_per_second": [0-9.]*' $O/$1.json) $(grep -oE '[0-9.]+ ms each in Forward' $O/$1.err)"
  grep -E 'rror|panic' $O/$1.err | head -3
}
for rep in 1 2 3; do
  log rep $rep
  one main_r${rep} kt-main -
  for D in 0 1 2 4; do one r${rep}_d$D kt $D; done
done
log StreamRead; timeout 15 $B/cpu.test -test.run XXX -test.bench StreamRead -test.benchtime 8x 2>&1 | grep -E 'Stream'
tar czf $OUT/res.tgz -C /tmp res
log end
