#!/usr/bin/env bash
# Expert routing of the bundled trained model (testdata/models/qwen3moe-trained)
# on its held-out text: per MoE layer, how skewed the picks are, and per GPU
# expert placement strategy and ratio, the share of routed (token, expert)
# picks that land on GPU experts (kt bench --type routing, on the CPU).
#
# The frequency strategy's counts are recorded on a calibration text that is
# not the held-out text: the .py files of the email, http and json packages of
# a Python 3.12 standard library (STDLIB), sorted by path, without the files
# tools/train/train_moe.py holds out (crc32 of "stdlib/PATH" = 0 mod 20), up to
# CALIB_BYTES. The script prints how many 200-character substrings of it occur
# in the held-out text.
#
#   bench/build.sh && bench/routing.sh                 # anywhere (CPU)
#
# Settings: MODEL, STDLIB (python3's stdlib directory), CALIB_BYTES (1000000),
# CTX (512).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need "$KT"
MODEL=${MODEL:-$ROOT/testdata/models/qwen3moe-trained}
STDLIB=${STDLIB:-$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}
CALIB_BYTES=${CALIB_BYTES:-1000000} CTX=${CTX:-512}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$STDLIB" "$MODEL/heldout.txt" "$tmp/calib.txt" "$CALIB_BYTES" <<'PY'
import os, sys, zlib
stdlib, heldout, out, cap = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
docs, total = [], 0
for pkg in ("email", "http", "json"):
    for d, dirs, files in os.walk(os.path.join(stdlib, pkg)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            p = os.path.join(d, f)
            if not f.endswith(".py") or zlib.crc32(("stdlib/" + os.path.relpath(p, stdlib)).encode()) % 20 == 0:
                continue
            t = open(p, encoding="utf-8").read()
            if total + len(t.encode()) + 1 > cap:
                break
            docs.append(t)
            total += len(t.encode()) + 1
text = "\n".join(docs)
open(out, "w", encoding="utf-8").write(text)
h, W = open(heldout, encoding="utf-8").read(), 200
seen = {h[i:i + W] for i in range(len(h) - W + 1)}
shared = sum(text[i:i + W] in seen for i in range(len(text) - W + 1))
print(f"== calibration text: {len(docs)} files of {stdlib}, {len(text.encode())} bytes; "
      f"{shared} of its {W}-character substrings occur in the held-out text")
PY
"$KT" bench --type routing --model-path "$MODEL" --data "$MODEL/heldout.txt" --calib "$tmp/calib.txt" --ctx "$CTX" 2>/dev/null
