#!/usr/bin/env bash
# The CPU expert engine alone: one MoE layer per method and token count (kt
# bench --type moe), each row beside the baselines of the same invocation: a
# streaming-read probe on every core (%read: the share of the read bandwidth
# the weights stream at, the bound at few tokens), the AMX tile probe, and with
# --compare-torch PyTorch's expert-by-expert bf16 MoE at the same thread count
# (xtorch). Layers go round-robin over more bytes than the L3 holds, so the
# weights come from memory. Needs a cgo build; --compare-torch needs python3
# with torch (set TORCH=0 without it).
#
#   bench/moe_engine.sh                 # the table: both Qwen layer shapes
#   PART=target bench/moe_engine.sh     # the 4096-token prefill row, five rounds, per phase
#   MODELS=deepseek-v3 TOKENS=1,4096 bench/moe_engine.sh
#   KT_A=bin/kt_main KT_B=bin/kt bench/moe_engine.sh   # two builds, alternated
#
# Settings: PART (table, target or both), MODELS (qwen3.5-35b-a3b,qwen3-30b-a3b;
# also qwen3-next-80b-a3b, deepseek-v3, kimi-k2), METHODS
# (AMXINT4,INT4_KGROUP,AMXINT8,AMXBF16; also RAWINT4: random packed INT4
# codes in groups of 32, as Kimi-K2-Thinking's), TOKENS (1,4,32,512,4096), ROUNDS (3),
# TORCH (1), ROUNDS_AB (1: rounds of the A/B alternation).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PART=${PART:-table} MODELS=${MODELS:-qwen3.5-35b-a3b,qwen3-30b-a3b} METHODS=${METHODS:-AMXINT4,INT4_KGROUP,AMXINT8,AMXBF16}
TOKENS=${TOKENS:-1,4,32,512,4096} ROUNDS=${ROUNDS:-3} TORCH=${TORCH:-1} ROUNDS_AB=${ROUNDS_AB:-1}
builds
torch=(); [ "$TORCH" = 1 ] && torch=(--compare-torch)
for r in $(seq 1 "$ROUNDS_AB"); do
  for i in $(order "$r"); do
    b=${BUILDS[$i]}
    if [ "$PART" = table ] || [ "$PART" = both ]; then
      echo "== round $r $(label "$i"): $MODELS, $METHODS at $TOKENS tokens"
      "$b" bench --type moe --model "$MODELS" --methods "$METHODS" --tokens "$TOKENS" --min-time 200ms \
        --rounds "$ROUNDS" "${torch[@]}"
    fi
    if [ "$PART" = target ] || [ "$PART" = both ]; then
      echo "== round $r $(label "$i"): qwen3-30b-a3b prefill, 4096 tokens, five rounds with phases"
      "$b" bench --type moe --model qwen3-30b-a3b --methods AMXINT8,AMXBF16 --tokens 4096 --min-time 200ms \
        --rounds 5 "${torch[@]}" --phases
    fi
  done
done
