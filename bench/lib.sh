# Helpers the bench scripts source; not run on its own.
#
# Every script reads its binaries from BIN (default: bin/ at the repository
# root, where bench/build.sh puts them) and writes what it prints to stdout.
# Binaries can be named one by one: KT (the kt command), and the test binaries
# QWEN3NEXT_TEST, QWEN3MOE_TEST, DEEPSEEKV3_TEST, CPU_TEST. To compare two builds, set KT_A and
# KT_B: the scripts that take them alternate the two, flipping the order every
# other round, so both see the same host state.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$ROOT/bin}
KT=${KT:-$BIN/kt}
QWEN3NEXT_TEST=${QWEN3NEXT_TEST:-$BIN/qwen3next.test}
QWEN3MOE_TEST=${QWEN3MOE_TEST:-$BIN/qwen3moe.test}
DEEPSEEKV3_TEST=${DEEPSEEKV3_TEST:-$BIN/deepseekv3.test}
CPU_TEST=${CPU_TEST:-$BIN/cpu.test}
# Synthetic checkpoints: real widths, random bf16 weights, 8 layers.
SYNTH_Q35=${SYNTH_Q35:-/tmp/kt-synth-qwen35}
SYNTH_Q3=${SYNTH_Q3:-/tmp/kt-synth-qwen3}
# The prompt every decode benchmark starts from.
PROMPT_IDS=615,892,721,286,283,347,17,99

need() {
  local f
  for f in "$@"; do
    [ -x "$f" ] || { echo "missing binary $f (run bench/build.sh, or set BIN / the variable naming it)" >&2; exit 1; }
  done
}

# builds sets BUILDS to the binaries to measure: KT_A and KT_B when both are
# set, else KT alone.
builds() {
  if [ -n "${KT_A:-}" ] && [ -n "${KT_B:-}" ]; then
    need "$KT_A" "$KT_B"
    BUILDS=("$KT_A" "$KT_B")
    echo "A = $KT_A, B = $KT_B"
  else
    need "$KT"
    BUILDS=("$KT")
  fi
}

# order R prints the indices into BUILDS in round R's order (flipped every
# other round).
order() {
  if [ ${#BUILDS[@]} = 1 ]; then echo 0
  elif [ $(($1 % 2)) = 1 ]; then printf '0\n1\n'
  else printf '1\n0\n'
  fi
}

# label I names build I in the output: A or B, or kt alone.
label() {
  if [ ${#BUILDS[@]} = 1 ]; then echo kt; elif [ "$1" = 0 ]; then echo A; else echo B; fi
}

# synth FAMILY DIR writes a synthetic checkpoint of SYNTH_LAYERS (8) layers of
# FAMILY (qwen3next: Qwen3.5-35B-A3B widths; qwen3moe: Qwen3-30B-A3B widths;
# deepseek-v3, kimi-k2: those models' widths) to DIR unless one is there.
synth() {
  local family=$1 dir=$2 test run='^TestMakeSynthetic$'
  [ -f "$dir/config.json" ] && return 0
  case $family in
    qwen3next) test=$QWEN3NEXT_TEST ;;
    qwen3moe) test=$QWEN3MOE_TEST ;;
    deepseek-v3) test=$DEEPSEEKV3_TEST ;;
    kimi-k2) test=$DEEPSEEKV3_TEST run='^TestMakeSyntheticKimiK2$' ;;
    *) echo "synth: unknown family $family" >&2; return 1 ;;
  esac
  need "$test"
  echo "== writing the synthetic $family checkpoint to $dir"
  KT_SYNTH_OUT=$dir KT_SYNTH_LAYERS=${SYNTH_LAYERS:-8} "$test" -test.run "$run" -test.timeout 0 | tail -1
  sync
}

# probe MODEL prints the read bandwidth and the CPU decode bound of MODEL's
# routed experts (kt doctor --measure), the baseline of every CPU figure.
probe() {
  "${BUILDS[0]:-$KT}" doctor --measure --model-path "$1" 2>&1 | grep -E 'perf\.(read|decode)' | cut -c1-400 || true
}

# median reads numbers one a line and prints their median.
median() {
  sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
