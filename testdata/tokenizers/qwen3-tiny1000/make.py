"""Cut the Qwen3 tokenizer down to 1000 ids for the tiny test models.

Keeps ids 0-990 of Qwen3's byte-level BPE vocabulary (every byte and the
first merges), the merges among them, and puts the chat special tokens at
991-999, so that `kt serve` can pair testdata/models/qwen3moe-* (vocab 1000)
with a real tokenizer and Qwen3's chat template.

    python3 make.py /work/shared/assets/qwen3-tokenizer OUT_DIR
"""
import json, sys

src, out = sys.argv[1], sys.argv[2]
t = json.load(open(f"{src}/tokenizer.json"))
keep = 991
vocab = {k: v for k, v in t["model"]["vocab"].items() if v < keep}
merges = [m for m in t["model"]["merges"] if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
t["model"]["vocab"] = vocab
t["model"]["merges"] = merges
names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
old = {a["content"]: a for a in t["added_tokens"]}
t["added_tokens"] = []
for i, n in enumerate(names):
    a = dict(old[n])
    a["id"] = keep + i
    t["added_tokens"].append(a)
json.dump(t, open(f"{out}/tokenizer.json", "w"), ensure_ascii=False)
tc = json.load(open(f"{src}/tokenizer_config.json"))
tc["added_tokens_decoder"] = {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in t["added_tokens"]}
tc["additional_special_tokens"] = [n for n in tc.get("additional_special_tokens", []) if n in names]
json.dump(tc, open(f"{out}/tokenizer_config.json", "w"), ensure_ascii=False, indent=2)
print(len(vocab), "tokens,", len(merges), "merges")
