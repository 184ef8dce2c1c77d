#!/usr/bin/env bash
# Quality of kt on the bundled trained model (testdata/models/qwen3moe-trained)
# against transformers: greedy ids and logprobs of its held-out reference
# prompts on every path (CPU reference op, CPU expert engine, wholly on the
# GPU, the hybrid step), then held-out perplexity per CPU expert method on the
# first SLICE bytes of its held-out text, beside the float32 reference op.
#
#   bench/build.sh && bench/quality.sh                 # on the GPU machine
#   MODES=cpu,engine bench/quality.sh                  # without a GPU
#
# Settings: MODES (cpu,engine,gpu,hybrid), SLICE (32768 bytes), METHODS.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need "$KT"
MODEL=${MODEL:-$ROOT/testdata/models/qwen3moe-trained}
MODES=${MODES:-cpu,engine,gpu,hybrid} SLICE=${SLICE:-32768}
METHODS=${METHODS:-BF16,AMXBF16,AMXINT8,AMXINT4,INT4_KGROUP}
tmp=$(mktemp -d)
head -c "$SLICE" "$MODEL/heldout.txt" >"$tmp/heldout.txt"
python3 "$ROOT/tools/train/check_kt.py" "$MODEL" "$KT" --modes "$MODES"
echo "== held-out perplexity on the first $SLICE bytes"
ppl() { # ppl DIR METHOD
  printf '%s: ' "$2"
  "$KT" eval --type perplexity --model-path "$1" --data "$tmp/heldout.txt" --device cpu --experts "$2" 2>/dev/null | grep perplexity
}
for m in backend ${METHODS//,/ }; do ppl "$MODEL" "$m"; done
echo "== the same on a block-scaled FP8 copy of the model (tools/train/to_fp8.py)"
python3 "$ROOT/tools/train/to_fp8.py" "$MODEL" "$tmp/fp8" >/dev/null
for m in backend FP8; do ppl "$tmp/fp8" "$m"; done
rm -rf "$tmp"
