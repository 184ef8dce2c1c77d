#!/usr/bin/env python3
"""Write a block-scaled FP8 copy of a trained checkpoint, as Qwen3-*-FP8 and DeepSeek-V3 publish them.

    python3 tools/train/to_fp8.py MODEL_DIR OUT_DIR [--block 128 128]

Every linear projection (attention, routed and shared experts) becomes
float8_e4m3fn with a float32 weight_scale_inv per block (the format
tools/fixtures/gen_hf_fixtures.py writes for its FP8 fixtures); embeddings,
norms and routers stay as they are. The tokenizer and held-out text are copied
so `kt eval --type perplexity --kt-method FP8` runs on OUT_DIR directly.
"""
import argparse
import os
import shutil
import sys

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from gen_hf_fixtures import quantize_fp8, text_dict, unfuse_experts, write_fp8  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--block", type=int, nargs=2, default=[128, 128])
    a = ap.parse_args()
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    qs = quantize_fp8(model, text_dict(model.config), a.block)
    os.makedirs(a.out, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(a.out, safe_serialization=True, max_shard_size="10GB")
    st = os.path.join(a.out, "model.safetensors")
    unfuse_experts(st, text_dict(model.config))
    n = write_fp8(st, os.path.join(a.out, "config.json"), qs, a.block)
    for f in ("tokenizer.json", "tokenizer_config.json", "heldout.txt", "generation_config.json"):
        if os.path.exists(os.path.join(a.model, f)):
            shutil.copy(os.path.join(a.model, f), a.out)
    print(f"{a.out}: {n} weights in FP8 blocks {a.block}")


if __name__ == "__main__":
    main()
