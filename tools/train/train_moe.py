#!/usr/bin/env python3
"""Train a small Qwen3-MoE language model on Python source text, offline, on one GPU.

    python3 tools/train/train_moe.py OUT_DIR [--time-budget 300] [--steps N] [--seed 0]

The corpus is the Python standard library's .py files (sysconfig's stdlib directory,
site-packages excluded), then PyTorch's own .py files,
each list sorted by path, read as UTF-8 (undecodable files, files over 1 MB and
files holding the text <|endoftext|> are skipped), up to --corpus-mb megabytes (60).
A file is held out when crc32 of its path key ("stdlib/..." or "torch/...") is 0
modulo 20; held-out files never reach the tokenizer or the model. OUT_DIR/heldout.txt
is the held-out files of at most 64 KB each, in path order, joined by one newline,
up to --heldout-kb kilobytes.

Tokenizer: byte-level BPE trained with the tokenizers library on the training files
(vocabulary --vocab, <|endoftext|> special, id 0), with Qwen2/Qwen3's pre-tokenizer
(NFC normalizer, Split on Qwen's regex, ByteLevel without its own regex) and a
ByteLevel decoder: the pipeline kt's tokenizer package implements. Training text is
each file's ids followed by <|endoftext|>, one stream, from which windows of --seq
tokens are drawn at random offsets.

Model: Qwen3MoeForCausalLM, hidden 256, 32 routed experts of moe_intermediate 128,
top-4 with renormalised weights, 4 heads / 2 KV heads of dim 64, tied embeddings,
--layers layers (3: the bf16 checkpoint must stay under 24 MB), router aux loss
(--aux-coef) during training. AdamW (0.9, 0.95, weight decay 0.1), bf16 autocast,
gradient clipping 1.0, linear warm-up for --warmup steps, then cosine decay to a
tenth of --lr. With --time-budget, steps 10 to 40 are timed and the total step count
is fixed at step 40 so that the whole run fits the budget (and reads the training tokens
at most --max-epochs times over); the learning rate up to
then does not depend on it, so the run is reproducible from the logged step count
(--steps N), up to the GPU's nondeterministic reductions. Tokenizing and evaluating
are outside the budget.

Held-out evaluation (the convention kt eval uses): heldout.txt is tokenized as one
string with no special tokens added, the ids are cut from the start into
non-overlapping windows of --ctx tokens (the last may be shorter), every window is
scored from a fresh context, and each token but a window's first is predicted from
the window's tokens before it; a window of one token scores nothing. Mean NLL is the
sum of -log p over scored tokens divided by their number; perplexity is exp(NLL).

OUT_DIR receives config.json, generation_config.json, model-0000x-of-0000y.safetensors
with model.safetensors.index.json (bf16, shards of at most 15 MB), tokenizer.json,
tokenizer_config.json, heldout.txt, reference.json (as tools/fixtures/gen_hf_fixtures.py
writes it: prompts cut from the held-out ids, computed in float32 on the CPU with eager
attention and no KV cache, from the saved bf16 weights) and train_report.json (corpus,
steps, losses, the float32 held-out NLL and perplexity, routing shares).
"""
import argparse
import hashlib
import json
import math
import os
import sys
import sysconfig
import time
import zlib

import torch
import transformers
from safetensors import safe_open
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from gen_hf_fixtures import reference  # noqa: E402  reference.json's cases, as every fixture's

EOS = "<|endoftext|>"
# Qwen2/Qwen3's split regex, exactly as tokenizer/pretokenize.go's qwen2Pattern.
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                 r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
HELDOUT_MOD = 20
MAX_FILE = 1 << 20
MAX_HELDOUT_FILE = 64 << 10
MAX_CKPT_BYTES = 24_000_000
MAX_SHARD_FILE = 16 << 20


def log(*a):
    print(*a, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--time-budget", type=float, default=300.0, help="seconds of training (wall clock)")
    p.add_argument("--steps", type=int, default=0, help="train exactly this many steps (overrides --time-budget)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus-mb", type=float, default=60.0)
    p.add_argument("--heldout-kb", type=float, default=400.0)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--max-epochs", type=float, default=8.0, help="with --time-budget: at most this many passes over the training tokens")
    p.add_argument("--aux-coef", type=float, default=0.01)
    p.add_argument("--ctx", type=int, default=512, help="held-out window in tokens")
    p.add_argument("--experts-impl", default="grouped_mm", help="transformers experts backend for training")
    return p.parse_args()


def seed_all(seed):
    import random
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


# ---------------------------------------------------------------- corpus

def py_files(root):
    """Sorted .py paths under root, skipping site-packages, dist-packages and __pycache__."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
        out.extend(os.path.join(d, f) for f in sorted(files) if f.endswith(".py"))
    return sorted(out)


def read_corpus(cap_bytes):
    """[(key, text)] in order, up to cap_bytes of UTF-8, and a description of the roots."""
    roots = [("stdlib", sysconfig.get_paths()["stdlib"]), ("torch", os.path.dirname(torch.__file__))]
    docs, total, skipped = [], 0, 0
    desc = []
    for name, root in roots:
        n0 = len(docs)
        for path in py_files(root):
            if total >= cap_bytes:
                break
            try:
                if os.path.getsize(path) > MAX_FILE:
                    skipped += 1
                    continue
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                skipped += 1
                continue
            if EOS in text or not text.strip():
                skipped += 1
                continue
            docs.append((name + "/" + os.path.relpath(path, root), text))
            total += len(text.encode("utf-8"))
        desc.append(dict(name=name, root=root, files=len(docs) - n0))
    return docs, dict(roots=desc, files=len(docs), bytes=total, skipped=skipped)


def is_heldout(key):
    return zlib.crc32(key.encode("utf-8")) % HELDOUT_MOD == 0


def split_corpus(docs, heldout_cap):
    train, held, held_bytes = [], [], 0
    for key, text in docs:
        if not is_heldout(key):
            train.append((key, text))
            continue
        size = len(text.encode("utf-8"))
        if size <= MAX_HELDOUT_FILE and held_bytes + size <= heldout_cap:
            held.append((key, text))
            held_bytes += size + 1
    return train, held


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(texts, vocab):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def check_tokenizer_json(path):
    """The saved tokenizer.json has the shape kt's tokenizer package loads (tokenizer/load.go)."""
    with open(path) as f:
        j = json.load(f)
    pt = j["pre_tokenizer"]
    assert pt["type"] == "Sequence" and len(pt["pretokenizers"]) == 2, pt
    split, bl = pt["pretokenizers"]
    assert split["type"] == "Split" and split["pattern"].get("Regex") == QWEN2_PATTERN, split
    assert split["behavior"] == "Isolated" and not split["invert"], split
    assert bl["type"] == "ByteLevel" and not bl["add_prefix_space"] and bl["use_regex"] is False, bl
    assert j["decoder"]["type"] == "ByteLevel", j["decoder"]
    assert j["normalizer"]["type"] == "NFC", j["normalizer"]
    m = j["model"]
    assert m["type"] == "BPE" and not m.get("byte_fallback") and not m.get("dropout"), {k: m[k] for k in m if k not in ("vocab", "merges")}


def write_tokenizer(tok, out, eos_id):
    path = os.path.join(out, "tokenizer.json")
    tok.save(path)
    check_tokenizer_json(path)
    cfg = dict(tokenizer_class="PreTrainedTokenizerFast", eos_token=EOS, pad_token=EOS, bos_token=None,
               unk_token=None, add_bos_token=False, add_eos_token=False, clean_up_tokenization_spaces=False,
               model_max_length=2048,
               added_tokens_decoder={str(eos_id): dict(content=EOS, lstrip=False, normalized=False, rstrip=False,
                                                       single_word=False, special=True)})
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def ids_sha256(ids):
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


# ---------------------------------------------------------------- model

def make_config(vocab, layers, eos_id, aux_coef):
    return transformers.Qwen3MoeConfig(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
        rope_theta=10000.0, rms_norm_eps=1e-6, num_experts=32, num_experts_per_tok=4, moe_intermediate_size=128,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=True,
        router_aux_loss_coef=aux_coef, output_router_logits=False, attention_dropout=0.0, use_cache=False,
        eos_token_id=eos_id, bos_token_id=eos_id, pad_token_id=eos_id, attn_implementation="sdpa")


def count_params(model):
    return sum(p.numel() for p in model.parameters())  # tied weights counted once


def set_experts(model, impl):
    """Switch the experts backend; returns the one in use."""
    try:
        model.set_experts_implementation(impl)
        return impl
    except Exception as e:  # older transformers, or a backend missing here
        log(f"experts backend {impl} unavailable ({type(e).__name__}: {e}); eager")
        return "eager"


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def batch_at(data, gen, batch, seq):
    starts = torch.randint(0, data.numel() - seq, (batch,), generator=gen)
    idx = starts[:, None] + torch.arange(seq)[None, :]
    return data[idx]


def train(model, data, args, device):
    gen = torch.Generator().manual_seed(args.seed + 1)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.1), dict(params=no_decay, weight_decay=0.0)],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    total = args.steps if args.steps > 0 else 10 ** 9
    # the step count is fixed while the learning rate is still warming up
    probe_a, probe_b = 10, max(11, min(40, args.warmup))
    t0 = time.time()
    ta = t0
    hist = []
    step = 0
    acc_loss = torch.zeros((), device=device)  # sums since the last log line, read only there
    acc_aux = torch.zeros((), device=device)
    acc_n = 0
    model.train()
    while step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, args.lr, args.warmup)
        x = batch_at(data, gen, args.batch, args.seq).to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x, output_router_logits=True, use_cache=False)
        loss = out.loss
        acc_loss += loss.detach()
        if getattr(out, "aux_loss", None) is not None:
            acc_aux += out.aux_loss.detach().float()
        acc_n += 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == probe_a:
            torch.cuda.synchronize()
            ta = time.time()
        if step == probe_b and args.steps <= 0:
            torch.cuda.synchronize()
            per = (time.time() - ta) / (probe_b - probe_a)
            left = args.time_budget - (time.time() - t0)
            cap = int(args.max_epochs * data.numel() / (args.batch * args.seq))
            total = max(probe_b + args.warmup, min(cap, probe_b + int(left / per)))
            log(f"step time {per * 1e3:.1f} ms: training {total} steps in all")
        if step % 100 == 0 or step == total:
            aux = float(acc_aux) / acc_n
            lm = float(acc_loss) / acc_n - args.aux_coef * aux
            acc_loss.zero_()
            acc_aux.zero_()
            acc_n = 0
            hist.append(dict(step=step, loss=lm,  # means over the steps since the last entry aux_loss=aux, lr=opt.param_groups[0]["lr"],
                             seconds=round(time.time() - t0, 1)))
            log(f"step {step}/{total} loss {lm:.4f} aux {aux:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{time.time() - t0:.0f}s")
    torch.cuda.synchronize()
    model.eval()
    return step, time.time() - t0, hist


def probe_experts(model, data, args, device):
    """Run one forward/backward with the requested experts backend and with eager on the same batch;
    keep the backend when it runs and agrees (else eager). Gradients are cleared."""
    gen = torch.Generator().manual_seed(12345)
    x = batch_at(data, gen, 4, args.seq).to(device)
    losses = {}
    for impl in (args.experts_impl, "eager"):
        used = set_experts(model, impl)
        try:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x, output_router_logits=True, use_cache=False).loss
            loss.backward()
            losses[used] = float(loss)
        except Exception as e:
            log(f"experts backend {used} failed: {type(e).__name__}: {e}")
        model.zero_grad(set_to_none=True)
    want = args.experts_impl
    if want in losses and "eager" in losses and abs(losses[want] - losses["eager"]) < 0.05:
        set_experts(model, want)
        return want, losses
    set_experts(model, "eager")
    return "eager", losses


# ---------------------------------------------------------------- evaluation

def windows(ids, ctx):
    return [ids[i:i + ctx] for i in range(0, len(ids), ctx) if len(ids[i:i + ctx]) >= 2]


@torch.no_grad()
def heldout_nll(model, ids, ctx, device, autocast, n_experts=None, top_k=None):
    """(mean NLL, scored tokens, per-layer expert pick counts or None) by the module docstring's convention."""
    nll, n = 0.0, 0
    counts = None
    ws = windows(ids, ctx)
    full = [w for w in ws if len(w) == ctx]
    groups = [full[i:i + 16] for i in range(0, len(full), 16)] + [[w] for w in ws if len(w) != ctx]
    for g in groups:
        x = torch.tensor(g, device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            out = model(input_ids=x, use_cache=False, output_router_logits=n_experts is not None)
        lp = torch.log_softmax(out.logits.float(), dim=-1)
        tgt = x[:, 1:]
        nll -= float(lp[:, :-1].gather(-1, tgt[..., None]).sum(dtype=torch.float64))
        n += tgt.numel()
        rl = getattr(out, "router_logits", None) if n_experts is not None else None
        if rl:
            if counts is None:
                counts = [torch.zeros(n_experts, dtype=torch.long) for _ in rl]
            for li, r in enumerate(rl):
                picks = torch.topk(r.float().reshape(-1, n_experts), top_k, dim=-1).indices.reshape(-1).cpu()
                counts[li] += torch.bincount(picks, minlength=n_experts)
    return nll / n, n, counts


def routing_summary(counts, n_experts):
    top = max(1, n_experts // 4)
    out = []
    for li, c in enumerate(counts or []):
        s = sorted(c.tolist(), reverse=True)
        tot = sum(s)
        out.append(dict(layer=li, top25_share=sum(s[:top]) / tot, max_share=s[0] / tot, min_share=s[-1] / tot,
                        unused_experts=sum(1 for v in s if v == 0)))
    return out


def load_f32(cls, out):
    kw = dict(dtype=torch.float32, attn_implementation="eager")
    try:
        m = cls.from_pretrained(out, experts_implementation="eager", **kw)
    except TypeError:
        m = cls.from_pretrained(out, **kw)
    m.eval()
    return m


def checkpoint_files(out):
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        idx = json.load(f)
    files = sorted(set(idx["weight_map"].values()))
    names = []
    for fn in files:
        with safe_open(os.path.join(out, fn), "pt") as f:
            names.extend(f.keys())
    return files, sorted(names)


# ---------------------------------------------------------------- main

def main():
    args = parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    seed_all(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    device = torch.device("cuda")
    log("transformers", transformers.__version__, "torch", torch.__version__, "gpu", torch.cuda.get_device_name(0))
    t_start = time.time()

    docs, corpus = read_corpus(int(args.corpus_mb * 1e6))
    train_docs, held_docs = split_corpus(docs, int(args.heldout_kb * 1e3))
    heldout_text = "\n".join(t for _, t in held_docs)
    with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(heldout_text)
    corpus.update(train_files=len(train_docs), train_bytes=sum(len(t.encode()) for _, t in train_docs),
                  heldout_pool_files=sum(1 for k, _ in docs if is_heldout(k)), heldout_files=len(held_docs),
                  heldout_bytes=len(heldout_text.encode()),
                  heldout_first=[k for k, _ in held_docs[:5]])
    log("corpus", json.dumps(corpus))

    tok = train_tokenizer([t for _, t in train_docs], args.vocab)
    eos_id = tok.token_to_id(EOS)
    vocab = tok.get_vocab_size()
    assert eos_id is not None and vocab <= args.vocab, (eos_id, vocab)
    write_tokenizer(tok, out, eos_id)
    stream = []
    for enc in tok.encode_batch([t for _, t in train_docs], add_special_tokens=False):
        stream.extend(enc.ids)
        stream.append(eos_id)
    data = torch.tensor(stream, dtype=torch.long)
    held_ids = encode(tok, heldout_text)
    log(f"tokenizer: vocab {vocab}, eos {eos_id}; train tokens {data.numel()}, held-out tokens {len(held_ids)}, "
        f"{corpus['train_bytes'] / data.numel():.2f} bytes/token ({time.time() - t_start:.0f}s)")

    cfg = make_config(vocab, args.layers, eos_id, args.aux_coef)
    torch.manual_seed(args.seed)
    cls = transformers.Qwen3MoeForCausalLM
    model = cls(cfg)
    n_params = count_params(model)
    ckpt_bytes = 2 * n_params
    log(f"parameters {n_params} ({ckpt_bytes / 1e6:.1f} MB in bf16), layers {args.layers}")
    assert ckpt_bytes <= MAX_CKPT_BYTES, f"bf16 checkpoint {ckpt_bytes} bytes > {MAX_CKPT_BYTES}: use fewer --layers"
    model.to(device)
    experts_impl, probe = probe_experts(model, data, args, device)
    log(f"experts backend for training: {experts_impl} (probe losses {probe})")

    steps, train_sec, hist = train(model, data, args, device)
    nll_bf16, _, _ = heldout_nll(model, held_ids, args.ctx, device, autocast=True)
    log(f"trained {steps} steps in {train_sec:.0f}s; held-out NLL (bf16 autocast, GPU) {nll_bf16:.4f}")

    # save bf16: a copy, so that the training model keeps its float32 buffers
    model.to("cpu")
    model.config.use_cache = True
    model.generation_config = transformers.GenerationConfig(eos_token_id=eos_id, pad_token_id=eos_id,
                                                            bos_token_id=eos_id, do_sample=False)
    save = cls(model.config)
    save.load_state_dict(model.state_dict())
    save.generation_config = model.generation_config
    save = save.to(torch.bfloat16)
    save.save_pretrained(out, safe_serialization=True, max_shard_size="15MB")
    del save
    if not os.path.exists(os.path.join(out, "model.safetensors.index.json")):
        # one shard only: still write the index so that the layout is the same
        from safetensors.torch import load_file, save_file
        sd = load_file(os.path.join(out, "model.safetensors"))
        os.remove(os.path.join(out, "model.safetensors"))
        name = "model-00001-of-00001.safetensors"
        save_file(sd, os.path.join(out, name), metadata={"format": "pt"})
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump(dict(metadata=dict(total_size=sum(v.numel() * v.element_size() for v in sd.values())),
                           weight_map={k: name for k in sorted(sd)}), f, indent=2)
    files, tensor_names = checkpoint_files(out)
    sizes = {fn: os.path.getsize(os.path.join(out, fn)) for fn in files}
    assert all(s <= MAX_SHARD_FILE for s in sizes.values()), sizes
    log("checkpoint", sizes)

    # float32 reference from the saved bf16 weights, on the CPU, eager attention
    ref_model = load_f32(cls, out)
    try:  # the files on disk hold the trained weights rounded to bf16
        with torch.no_grad():
            rounded = {k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()}
            model.load_state_dict(rounded)
            x = torch.tensor([held_ids[:200]])
            reload_diff = float((model(input_ids=x, use_cache=False).logits
                                 - ref_model(input_ids=x, use_cache=False).logits).abs().max())
    except Exception as e:  # record, don't fail
        reload_diff = f"reload check failed: {type(e).__name__}: {e}"[:300]
    del model
    t_eval = time.time()
    nll32, n_tok, counts = heldout_nll(ref_model, held_ids, args.ctx, torch.device("cpu"), autocast=False,
                                       n_experts=cfg.num_experts, top_k=cfg.num_experts_per_tok)
    routing = routing_summary(counts, cfg.num_experts)
    log(f"held-out (float32, CPU): {n_tok} tokens scored, NLL {nll32:.5f}, perplexity {math.exp(nll32):.4f} "
        f"({time.time() - t_eval:.0f}s)")
    for r in routing:
        log(f"routing layer {r['layer']}: top 25% of experts take {100 * r['top25_share']:.1f}% of picks "
            f"(busiest {100 * r['max_share']:.1f}%, idlest {100 * r['min_share']:.2f}%, unused {r['unused_experts']})")

    offsets = [0, len(held_ids) // 3, 2 * len(held_ids) // 3]
    prompts = [(f"heldout{n}", held_ids[o:o + n]) for o, n in zip(offsets, (6, 70, 200))]
    cases = reference(ref_model, prompts)
    ref = dict(generator="tools/train/train_moe.py", transformers=transformers.__version__, torch=torch.__version__,
               architecture=cls.__name__, kind="qwen3_moe", dtype="float32", weights_dtype="bfloat16",
               fp8_block=None, fp8_transformers_max_abs_diff=None, expert_layout="as transformers saved it",
               reload_max_abs_diff=reload_diff, attn_implementation="eager", tensor_names=tensor_names, cases=cases)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f)

    hf_tok = None
    try:
        at = transformers.AutoTokenizer.from_pretrained(out)
        sample = heldout_text[:4000]
        hf_tok = at(sample, add_special_tokens=False)["input_ids"] == encode(tok, sample)
    except Exception as e:
        hf_tok = f"AutoTokenizer failed: {type(e).__name__}: {e}"[:300]

    report = dict(
        generator="tools/train/train_moe.py", transformers=transformers.__version__, torch=torch.__version__,
        gpu=torch.cuda.get_device_name(0), args=vars(args), corpus=corpus,
        tokenizer=dict(vocab_size=vocab, eos_id=eos_id, train_tokens=data.numel(),
                       autotokenizer_matches=hf_tok),
        model=dict(parameters=n_params, bf16_bytes=ckpt_bytes, layers=args.layers, experts=cfg.num_experts,
                   top_k=cfg.num_experts_per_tok, hidden=cfg.hidden_size, moe_intermediate=cfg.moe_intermediate_size,
                   shards=sizes),
        training=dict(steps=steps, seconds=round(train_sec, 1), experts_backend=experts_impl,
                      tokens=steps * args.batch * args.seq, final_loss=hist[-1]["loss"] if hist else None,
                      history=hist),
        heldout_chunking=(f"heldout.txt tokenized as one string without special tokens; non-overlapping windows of "
                          f"{args.ctx} tokens from the start (the last may be shorter), each from a fresh context; "
                          f"every token but a window's first is scored"),
        heldout_ctx=args.ctx, heldout_tokens=n_tok, heldout_ids=len(held_ids), heldout_ids_sha256=ids_sha256(held_ids),
        heldout_nll_f32=nll32, heldout_ppl_f32=math.exp(nll32), heldout_nll_bf16_gpu=nll_bf16,
        heldout_ppl_bf16_gpu=math.exp(nll_bf16), reload_max_abs_diff=reload_diff, routing=routing,
        total_seconds=round(time.time() - t_start, 1))
    with open(os.path.join(out, "train_report.json"), "w") as f:
        json.dump(report, f, indent=1)
    summary = {k: report[k] for k in ("heldout_tokens", "heldout_nll_f32", "heldout_ppl_f32", "heldout_nll_bf16_gpu",
                                      "reload_max_abs_diff", "total_seconds")}
    summary.update(steps=steps, final_train_loss=report["training"]["final_loss"], parameters=n_params,
                   autotokenizer_matches=hf_tok)
    log("report", json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
