#!/usr/bin/env python3
"""Write a block-scaled FP8 copy of a bf16 checkpoint, as Qwen3-*-FP8 and DeepSeek-V3 publish them.

    python3 tools/train/to_fp8.py MODEL_DIR OUT_DIR [--block 128]

Every 2-D linear projection (`*_proj.weight`: attention, routed and shared
experts; `kv_a_proj_with_mqa.weight`) becomes float8_e4m3fn with a float32
`<name>_scale_inv` of ceil(O/B) x ceil(K/B) blocks (scale = max|w| / 448 per
block, codes rounded to nearest even), the format
tools/fixtures/gen_hf_fixtures.py writes for its FP8 fixtures; embeddings,
norms and routers stay bf16, and config.json gets quantization_config. The
tokenizer and held-out text are copied, so `kt eval --type perplexity
--experts FP8` runs on OUT_DIR directly. Pure Python (no torch): it runs on
any machine, in about a minute for the bundled 11 M-parameter model.
"""
import argparse
import bisect
import glob
import json
import math
import os
import shutil
import struct

FP8_MAX = 448.0
SKIP = ("mlp.gate.weight", "shared_expert_gate.weight")


def e4m3_table():
    """The non-negative finite float8_e4m3fn values, ascending, with their codes."""
    vals = []
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue  # NaN
            v = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
            vals.append((v, e << 3 | m))
    vals.sort()
    return [v for v, _ in vals], [c for _, c in vals]


VALS, CODES = e4m3_table()


def encode(x):
    """float8_e4m3fn code of x: clamped to +-448, rounded to nearest, ties to the even code."""
    sign = 0x80 if x < 0 else 0
    a = min(abs(x), FP8_MAX)
    i = bisect.bisect_left(VALS, a)
    if i == len(VALS):
        i -= 1
    elif i > 0:
        lo, hi = VALS[i - 1], VALS[i]
        if a - lo < hi - a or (a - lo == hi - a and CODES[i - 1] % 2 == 0):
            i -= 1
    code = CODES[i]
    return code | sign if code else 0


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        dtype, shape, raw = tensors[k]
        header[k] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def bf16_values(raw):
    n = len(raw) // 2
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack(f"<{n}H", raw)]


def quantize(raw, shape, block):
    """FP8 codes (bytes) and float32 block scales (bytes) of a bf16 [O, K] matrix."""
    O, K = shape
    w = bf16_values(raw)
    bo, bk = -(-O // block), -(-K // block)
    scales = [1.0] * (bo * bk)
    for i in range(bo):
        rows = range(i * block, min((i + 1) * block, O))
        for j in range(bk):
            c0, c1 = j * block, min((j + 1) * block, K)
            amax = max(abs(w[r * K + c]) for r in rows for c in range(c0, c1))
            scales[i * bk + j] = amax / FP8_MAX if amax > 0 else 1.0
    q = bytearray(O * K)
    for r in range(O):
        srow = scales[(r // block) * bk:(r // block + 1) * bk]
        for c in range(K):
            q[r * K + c] = encode(w[r * K + c] / srow[c // block])
    return bytes(q), struct.pack(f"<{len(scales)}f", *scales), [bo, bk]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--block", type=int, default=128)
    a = ap.parse_args()
    tensors = {}
    for p in sorted(glob.glob(os.path.join(a.model, "*.safetensors"))):
        tensors.update(read_safetensors(p))
    out, n = {}, 0
    for k, (dtype, shape, raw) in tensors.items():
        linear = k.endswith(("_proj.weight", "kv_a_proj_with_mqa.weight")) and not k.endswith(SKIP)
        if linear and len(shape) == 2 and dtype == "BF16":
            q, s, sshape = quantize(raw, shape, a.block)
            out[k] = ("F8_E4M3", shape, q)
            out[k + "_scale_inv"] = ("F32", sshape, s)
            n += 1
        else:
            out[k] = (dtype, shape, raw)
    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "model.safetensors"), out)
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [a.block, a.block]}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json", "heldout.txt", "generation_config.json"):
        if os.path.exists(os.path.join(a.model, f)):
            shutil.copy(os.path.join(a.model, f), a.out)
    print(f"{a.out}: {n} weights in FP8 blocks of {a.block}x{a.block}")


if __name__ == "__main__":
    main()
