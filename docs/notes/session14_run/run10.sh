#!/bin/bash
# session 14 call 10: where kernel copies stop paying. BenchmarkHandOff at 8 KiB, 256 KiB and 8 MiB per transfer;
# hybrid prefill of the 8-layer Qwen3.5 (AMXINT4) at 512 and 4096 prompt tokens, KT_HYBRID_COPY kernel and memcpy
# alternated.
set -o pipefail
C=$PWD/.carry/s14c10; D=/tmp/b; mkdir -p $D
for f in kt cuda.test qwen3next.test; do xz -dc $C/$f.xz > $D/$f; chmod +x $D/$f; done
L=$OUT/log.txt
(cd backend/cuda && for i in 1 2; do timeout 200 $D/cuda.test -test.run XXX -test.bench 'HandOff' -test.benchtime 50x 2>&1 | grep -E 'Benchmark|FAIL|panic' | awk '{print $1, $(NF-3), $(NF-2), $(NF-1), $NF}' | tee -a $L; done)
KT_SYNTH_OUT=/tmp/q35 KT_SYNTH_LAYERS=8 timeout 240 $D/qwen3next.test -test.run TestMakeSynthetic -test.timeout 0 2>&1 | tail -1 | tee -a $L; sync
H="--kt-weight-path /tmp/q35 --kt-method AMXINT4 --kt-cpuinfer 15"
for T in 512 4096; do
  P=$(python3 -c "print(','.join(str((i*37)%150000+10) for i in range($T)))")
  for r in 1 2 3; do
    for m in memcpy kernel; do
      KT_HYBRID_COPY=$m timeout 150 $D/kt generate --model-path /tmp/q35 --input-ids $P --max-new-tokens 4 --ignore-eos --device cuda --chunked-prefill-size 4096 $H 2>&1 \
        | grep -E "prompt tokens|rror" | cut -c1-160 | sed "s/^/T=$T $m r$r: /" | tee -a $L
    done
  done
done
echo "end $SECONDS s" | tee -a $L
