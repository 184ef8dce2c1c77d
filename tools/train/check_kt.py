#!/usr/bin/env python3
"""Check kt against transformers' reference for one checkpoint, on every path.

    python3 tools/train/check_kt.py MODEL_DIR KT_BINARY [--modes cpu,gpu,hybrid] [--methods ...]

For each case of MODEL_DIR/reference.json (written by train_moe.py or
tools/fixtures/gen_hf_fixtures.py) it runs `kt generate --json
--prompt-logprobs --ignore-eos` greedily and compares the prompt logprobs,
the greedy ids and their logprobs with the reference. The modes:

  cpu     the model wholly on the CPU, routed experts through the reference MoE op (float32)
  engine  the model on the CPU, routed experts on the CPU expert engine (BF16: activations rounded to bf16)
  gpu     the model wholly on the GPU
  hybrid  routed experts on the CPU expert engine (BF16), the rest on the GPU

Then, with --heldout FILE, `kt eval --type perplexity` on each CPU expert
method (--methods) and path, beside transformers' float32 perplexity from
MODEL_DIR/train_report.json. Prints one table; exits 1 when a path's worst
logprob difference exceeds its bar (1e-3 CPU, 5e-3 GPU, 1e-1 for the
engine's bf16 paths) or a
greedy id differs where the reference's top-2 margin exceeds twice the bar.
"""
import argparse
import json
import math
import os
import subprocess
import sys

# The bars of the random-weight fixtures; the engine's bf16 activations are
# a quantized path, whose error is measured and printed, with a loose bar.
BARS = {"cpu": 1e-3, "gpu": 5e-3, "engine": 1e-1, "hybrid": 1e-1}


def path_flags(mode, method, model):
    if mode == "cpu":
        return ["--device", "cpu", "--experts", "backend"]
    if mode == "engine":
        return ["--device", "cpu", "--experts", method]
    if mode == "gpu":
        return ["--device", "cuda", "--experts", "backend"]
    return ["--device", "cuda", "--kt-method", method, "--kt-weight-path", model]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd[:4]), p.stderr.strip()[-400:]))
    return p.stdout


def check_case(kt, model, mode, case):
    n = len(case["greedy_ids"])
    out = json.loads(run([kt, "generate", "--model-path", model, "--json", "--prompt-logprobs", "--ignore-eos",
                          "--input-ids", ",".join(map(str, case["prompt_ids"])), "--max-new-tokens", str(n)]
                         + path_flags(mode, "BF16", model)))
    worst = 0.0
    for got, want in zip(out["prompt_logprobs"][1:], case["prompt_logprobs"][1:]):
        worst = max(worst, abs(got - want))
    bad_ids = 0
    bar = BARS[mode]
    for i, (tok, want_id) in enumerate(zip(out["output"], case["greedy_ids"])):
        if tok["id"] != want_id:
            if case["top2_margin"][i] > 2 * bar:
                bad_ids += 1
            break  # the continuation differs from here on
        worst = max(worst, abs(tok["logprob"] - case["greedy_logprobs"][i]))
    return worst, bad_ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("kt")
    ap.add_argument("--modes", default="cpu,engine,gpu,hybrid")
    ap.add_argument("--heldout", default="")
    ap.add_argument("--methods", default="BF16,AMXBF16,AMXINT8,AMXINT4,INT4_KGROUP,FP8")
    ap.add_argument("--ctx", type=int, default=512)
    a = ap.parse_args()
    ref = json.load(open(os.path.join(a.model, "reference.json")))
    failed = False
    print("| path | cases | worst logprob diff | bar | greedy ids differing above the margin |")
    print("|---|---|---|---|---|")
    for mode in a.modes.split(","):
        worst, bad = 0.0, 0
        for case in ref["cases"]:
            w, b = check_case(a.kt, a.model, mode, case)
            worst, bad = max(worst, w), bad + b
        ok = worst <= BARS[mode] and bad == 0
        failed |= not ok
        print("| %s | %d | %.2e | %.0e | %d |%s" % (mode, len(ref["cases"]), worst, BARS[mode], bad, "" if ok else " FAIL"))
    if not a.heldout:
        sys.exit(1 if failed else 0)
    report = json.load(open(os.path.join(a.model, "train_report.json")))
    print()
    print("held-out perplexity, transformers float32: %.4f (%d tokens, windows of %d)" % (
        report["heldout_ppl_f32"], report["heldout_tokens"], a.ctx))
    print("| path | method | perplexity | vs transformers | seconds |")
    print("|---|---|---|---|---|")
    for mode in a.modes.split(","):
        for method in (a.methods.split(",") if mode in ("engine", "hybrid") else ["-"]):
            try:
                out = json.loads(run([a.kt, "eval", "--type", "perplexity", "--model-path", a.model, "--data", a.heldout,
                                      "--ctx", str(a.ctx), "--json"] + path_flags(mode, method, a.model)))
            except RuntimeError as e:
                print("| %s | %s | error: %s | | |" % (mode, method, str(e).replace("\n", " ")[:200]))
                continue
            ppl = out["perplexity"]
            print("| %s | %s | %.4f | %+.3f %% | %.1f |" % (mode, method, ppl, 100 * (ppl / report["heldout_ppl_f32"] - 1),
                                                          out.get("seconds", float("nan"))))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
