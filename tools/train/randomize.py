#!/usr/bin/env python3
"""Write a copy of a checkpoint with the same shapes and tokenizer but random weights.

    python3 tools/train/randomize.py MODEL_DIR OUT_DIR

The baseline for measurements that depend on what a model learnt (routing skew,
the next-layer prefetch's hit rate): the weights are drawn as
tools/fixtures/gen_hf_fixtures.py draws its random fixtures, rounded to bf16.
"""
import os
import shutil
import sys

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from gen_hf_fixtures import cfg_tied, init_weights, round_bf16  # noqa: E402


def main():
    src, out = sys.argv[1], sys.argv[2]
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    init_weights(model, seed=1, tied=cfg_tied(model.config))
    round_bf16(model)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "heldout.txt", "generation_config.json"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), out)
    print(f"{out}: random weights in the shapes of {src}")


if __name__ == "__main__":
    main()
