#!/usr/bin/env bash
# The hybrid step's next-layer prefetch: how many of each MoE layer's expert
# picks its prediction (made one layer ahead) named, on the bundled trained
# model against a copy with the same shapes and random weights, in one run.
# Sampled decode (temperature 1) from a held-out prompt, experts on the CPU.
#
#   bench/build.sh && bench/prefetch.sh            # on the GPU machine
#
# Settings: TOKENS (256), METHOD (AMXBF16), CPUINFER (15).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need "$KT"
MODEL=${MODEL:-$ROOT/testdata/models/qwen3moe-trained}
TOKENS=${TOKENS:-256} METHOD=${METHOD:-AMXBF16} CPUINFER=${CPUINFER:-15}
tmp=$(mktemp -d)
python3 "$ROOT/tools/train/randomize.py" "$MODEL" "$tmp/random" >/dev/null
prompt=$(head -c 1500 "$MODEL/heldout.txt")
for m in "$MODEL" "$tmp/random"; do
  echo "== $(basename "$m")"
  KT_HYBRID_TIMING=1 "$KT" generate --model-path "$m" --prompt "$prompt" --ignore-eos --device cuda \
    --max-new-tokens "$TOKENS" --temperature 1 --seed 7 --kt-weight-path "$m" --kt-method "$METHOD" \
    --kt-cpuinfer "$CPUINFER" 2>&1 >/dev/null | grep -E 'prediction|decode [0-9.]+ tok/s|rror' | cut -c1-300
done
rm -rf "$tmp"
