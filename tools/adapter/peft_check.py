#!/usr/bin/env python3
"""Does `peft` load a `kt convert-adapter` output onto a transformers Qwen3.5 MoE model?

Run on the GPU machine (torch, transformers 5.x, peft, safetensors), from a directory holding
this script next to the converted fixture:

    python3 peft_check.py --base testdata/models/qwen35moe-b \
        --adapter adapter/ktconvert/testdata/tiny_qwen35/merged \
        [--per-expert-base testdata/models/qwen35moe-a] [--out report.json] [--dump-logits ref.safetensors]

--base is a tiny random Qwen3_5MoeForCausalLM whose shapes match the adapter
(adapter/ktconvert/testdata/tiny_qwen35 is built for testdata/models/qwen35moe-b).

What it reports (stdout and --out as JSON):
 1. how transformers holds the routed experts (fused 3-D parameters or per-expert Linear modules);
 2. PeftModel.from_pretrained(model, ADAPTER) - the user path - and, for every tensor of
    adapter_model.safetensors, whether it reached a LoRA module ("loaded": the module's weight
    equals the file's), found a module but was not loaded, or found no module at all;
 3. if keys were not loaded only because of the stripped "base_model.model." prefix (SGLang's
    format), the same load with the prefix put back;
 4. logits: base model; PEFT model; a reference made by merging W += (alpha/r)·B·A by hand
    into the base weights, once for the non-expert modules only, once for the routed experts
    only (logits_expert_lora: what kt serves for model=<served>, base + static expert LoRA) and
    once for all modules including the routed experts (written into the fused gate_up_proj /
    down_proj). If PEFT
    ignores the per-expert keys, its logits match the non-expert-only reference and differ
    from the full one, by the experts' share of the LoRA effect.
"""

import argparse
import copy
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import traceback
import warnings

import torch
from safetensors.torch import load_file, save_file

EXPERT_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.(lora_A|lora_B)\.weight$")


def is_expert_key(key):
    """SGLang-KT's startup split rule."""
    return ".mlp.experts." in key and any(p in key for p in (".gate_proj.", ".up_proj.", ".down_proj."))


def describe_experts(model):
    mod = model.get_submodule("model.layers.0.mlp.experts")
    info = {"class": type(mod).__name__, "params": {}, "submodules": []}
    for n, p in mod.named_parameters(recurse=False):
        info["params"][n] = list(p.shape)
    for n, _ in list(mod.named_children())[:4]:
        info["submodules"].append(n)
    info["fused"] = any(len(s) == 3 for s in info["params"].values())
    return info


def gate_up_layout(base_per_expert, num_experts):
    """Find how transformers lays out the fused gate_up_proj by loading a checkpoint stored with
    per-expert keys and comparing. Returns ("out_major"|"in_major", gate_first) or None."""
    if not base_per_expert or not os.path.isdir(base_per_expert):
        return None, "no per-expert checkpoint given"
    from transformers import AutoModelForCausalLM, AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(base_per_expert)
        try:
            m = AutoModelForCausalLM.from_pretrained(base_per_expert, dtype=torch.float32)
        except Exception:
            from transformers import AutoModelForImageTextToText

            m = AutoModelForImageTextToText.from_pretrained(base_per_expert, dtype=torch.float32)
        sd = load_file(os.path.join(base_per_expert, "model.safetensors"))
        gkey = next(k for k in sd if k.endswith("layers.0.mlp.experts.1.gate_proj.weight"))
        ukey = gkey.replace("gate_proj", "up_proj")
        g, u = sd[gkey].float(), sd[ukey].float()
        experts = next(mod for n, mod in m.named_modules() if n.endswith("layers.0.mlp.experts"))
        gu = experts.gate_up_proj[1].detach().float().cpu()
        for layout, w in (("out_major", gu), ("in_major", gu.t())):
            if w.shape[0] == 2 * g.shape[0]:
                if torch.equal(w[: g.shape[0]], g) and torch.equal(w[g.shape[0]:], u):
                    return (layout, True), "checked against " + base_per_expert
                if torch.equal(w[: g.shape[0]], u) and torch.equal(w[g.shape[0]:], g):
                    return (layout, False), "checked against " + base_per_expert
        return None, "per-expert weights not found in the fused parameter"
    except Exception as e:  # report, fall back to the documented layout
        return None, "layout check failed: %r" % (e,)


def merge_by_hand(model, adapter, scale, which, layout):
    """Return a copy of model with W += scale·B·A merged for the adapter's modules: which is
    "nonexpert" (every module but the routed experts), "expert" (the routed experts only, written
    into the fused gate_up_proj / down_proj) or "all"."""
    include_experts = which in ("expert", "all")
    m = copy.deepcopy(model)
    pairs = {}
    for k, v in adapter.items():
        mm = re.match(r"^(.*)\.(lora_A|lora_B)\.weight$", k)
        if mm:
            pairs.setdefault(mm.group(1), {})[mm.group(2)] = v
    applied, skipped = 0, []
    with torch.no_grad():
        for path, ab in pairs.items():
            if "lora_A" not in ab or "lora_B" not in ab:
                skipped.append(path + " (half a pair)")
                continue
            dev = next(m.parameters()).device
            delta = scale * (ab["lora_B"].float().to(dev) @ ab["lora_A"].float().to(dev))
            ex = EXPERT_RE.search(path + ".lora_A.weight")
            if ex:
                if not include_experts:
                    continue
                layer, e, proj = int(ex.group(1)), int(ex.group(2)), ex.group(3)
                experts = m.get_submodule("model.layers.%d.mlp.experts" % layer)
                if hasattr(experts, "gate_up_proj"):
                    (lay, gate_first) = layout
                    if proj == "down_proj":
                        w = experts.down_proj[e]
                        if lay == "out_major":
                            w += delta
                        else:
                            w += delta.t()
                    else:
                        inter = delta.shape[0]
                        first = (proj == "gate_proj") == gate_first
                        sl = slice(0, inter) if first else slice(inter, 2 * inter)
                        w = experts.gate_up_proj[e]
                        if lay == "out_major":
                            w[sl] += delta
                        else:
                            w[:, sl] += delta.t()
                else:
                    getattr(experts[e], proj).weight += delta
                applied += 1
                continue
            if which == "expert":
                continue
            try:
                lin = m.get_submodule(path)
            except AttributeError:
                skipped.append(path + " (no such module)")
                continue
            lin.weight += delta.to(lin.weight.dtype)
            applied += 1
    return m, applied, skipped


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def peft_status(peft_model, adapter, prefix):
    """For each adapter key, did it reach a LoRA module of peft_model?"""
    status = {}
    modules = dict(peft_model.named_modules())
    for k, v in adapter.items():
        mm = re.match(r"^(.*)\.(lora_A|lora_B)\.weight$", k)
        if not mm:
            status[k] = "not a LoRA factor"
            continue
        path = mm.group(1)
        if path.startswith("base_model.model."):
            path = path[len("base_model.model."):]
        mod = modules.get(prefix + path)
        holder = getattr(mod, mm.group(2), None) if mod is not None else None
        if holder is None or "default" not in holder:
            status[k] = "no LoRA module"
            continue
        w = holder["default"].weight.detach().float().cpu()
        status[k] = "loaded" if w.shape == v.shape and torch.equal(w, v.float()) else "module present, not loaded"
    return status


def tally(status):
    out = {}
    for k, s in status.items():
        kind = "expert" if is_expert_key(k) else "non-expert"
        out.setdefault(kind, {}).setdefault(s, 0)
        out[kind][s] += 1
    return out


def load_peft(base_model, adapter_dir, log):
    from peft import PeftModel

    caught = []
    handler = logging.Handler()
    handler.emit = lambda r: caught.append(r.getMessage())
    for name in ("peft", "transformers"):
        logging.getLogger(name).addHandler(handler)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        pm = PeftModel.from_pretrained(copy.deepcopy(base_model), adapter_dir)
    for name in ("peft", "transformers"):
        logging.getLogger(name).removeHandler(handler)
    msgs = [str(w.message) for w in ws] + caught
    for m in msgs:
        log("  peft said: " + m[:300].replace("\n", " "))
    return pm.eval(), [m[:2000] for m in msgs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--per-expert-base", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--dump-logits", default="", help="write input_ids and the base / non-expert-only / expert-only / full-LoRA reference logits (float32) here")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    report = {"ok": False}

    def log(s):
        print(s, flush=True)

    def save():
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=2, default=str)

    try:
        import peft
        import transformers
        from transformers import AutoModelForCausalLM

        report["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
        log("versions: %s" % report["versions"])
        cfg = json.load(open(os.path.join(args.adapter, "adapter_config.json")))
        scale = float(cfg["lora_alpha"]) / float(cfg["r"])
        adapter = load_file(os.path.join(args.adapter, "adapter_model.safetensors"))
        n_exp = sum(is_expert_key(k) for k in adapter)
        report["adapter"] = {"tensors": len(adapter), "expert": n_exp, "non_expert": len(adapter) - n_exp,
                             "r": cfg["r"], "lora_alpha": cfg["lora_alpha"], "target_modules": cfg["target_modules"]}
        log("adapter: %s" % report["adapter"])

        model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32, attn_implementation="eager")
        model = model.to(args.device).eval()
        report["model_class"] = type(model).__name__
        report["experts"] = describe_experts(model)
        log("model %s; layer-0 experts: %s" % (report["model_class"], report["experts"]))
        num_experts = model.config.num_experts if hasattr(model.config, "num_experts") else None

        layout, why = gate_up_layout(args.per_expert_base, num_experts)
        report["gate_up_layout"] = {"layout": layout, "how": why}
        if layout is None:
            layout = ("out_major", True)  # transformers' documented [E, 2I, H], gate first
        log("gate_up_proj layout: %s (%s)" % (layout, why))

        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=g).to(args.device)
        base_logits = logits(model, ids)

        # 1. The user path: PeftModel.from_pretrained on the converted directory as is.
        log("PeftModel.from_pretrained(model, %s):" % args.adapter)
        pm, msgs = load_peft(model, args.adapter, log)
        st = peft_status(pm, adapter, "base_model.model.")
        report["as_is"] = {"messages": msgs, "status": tally(st)}
        log("  per-key status: %s" % report["as_is"]["status"])
        report["as_is"]["examples"] = {s: [k for k, v in st.items() if v == s][:5] for s in set(st.values())}
        peft_logits = logits(pm, ids)
        used = "as_is"

        # 2. If non-expert keys were not loaded, retry with PEFT's own key prefix.
        nonexp_loaded = report["as_is"]["status"].get("non-expert", {}).get("loaded", 0)
        if nonexp_loaded < report["adapter"]["non_expert"]:
            tmp = tempfile.mkdtemp()
            try:
                save_file({"base_model.model." + k: v for k, v in adapter.items()}, os.path.join(tmp, "adapter_model.safetensors"), metadata={"format": "pt"})
                shutil.copy(os.path.join(args.adapter, "adapter_config.json"), tmp)
                log("retry with keys prefixed by base_model.model.:")
                pm2, msgs2 = load_peft(model, tmp, log)
                st2 = peft_status(pm2, adapter, "base_model.model.")
                report["prefixed"] = {"messages": msgs2, "status": tally(st2)}
                log("  per-key status: %s" % report["prefixed"]["status"])
                if report["prefixed"]["status"].get("non-expert", {}).get("loaded", 0) > nonexp_loaded:
                    peft_logits = logits(pm2, ids)
                    used = "prefixed"
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        report["logits_from"] = used

        # 3. References merged by hand.
        ref_ne, applied_ne, skipped_ne = merge_by_hand(model, adapter, scale, "nonexpert", layout)
        ref_all, applied_all, skipped_all = merge_by_hand(model, adapter, scale, "all", layout)
        ref_ex, applied_ex, _ = merge_by_hand(model, adapter, scale, "expert", layout)
        ne_logits, all_logits, ex_logits = logits(ref_ne, ids), logits(ref_all, ids), logits(ref_ex, ids)

        def d(a, b):
            return float((a - b).abs().max())

        cmp = {
            "lora_effect_nonexpert_max": d(ne_logits, base_logits),
            "lora_effect_full_max": d(all_logits, base_logits),
            "expert_share_max": d(all_logits, ne_logits),
            "lora_effect_expert_only_max": d(ex_logits, base_logits),
            "peft_vs_base_max": d(peft_logits, base_logits),
            "peft_vs_nonexpert_reference_max": d(peft_logits, ne_logits),
            "peft_vs_full_reference_max": d(peft_logits, all_logits),
            "merged_by_hand": {"nonexpert_pairs": applied_ne, "expert_pairs": applied_ex, "all_pairs": applied_all, "skipped": skipped_all[:10]},
        }
        report["logits"] = cmp
        if args.dump_logits:
            save_file({
                "input_ids": ids.cpu().to(torch.int64).contiguous(),
                "logits_base": base_logits.cpu().contiguous(),
                "logits_nonexpert_lora": ne_logits.cpu().contiguous(),
                "logits_full_lora": all_logits.cpu().contiguous(),
                "logits_expert_lora": ex_logits.cpu().contiguous(),
                "logits_peft": peft_logits.cpu().contiguous(),
            }, args.dump_logits, metadata={"base": args.base, "adapter": args.adapter, "scale": repr(scale),
                                           "note": "full = W += (alpha/r) B A merged by hand into every targeted module incl. routed experts (fused gate_up_proj [E,2I,H] gate first, down_proj [E,H,I]); float32, eager attention"})
        log("logits max |diff|: %s" % json.dumps(cmp))
        tol = 1e-3 * max(1.0, cmp["lora_effect_nonexpert_max"])
        report["verdict"] = {
            "peft_applies_nonexpert_lora": cmp["peft_vs_nonexpert_reference_max"] < tol or cmp["peft_vs_full_reference_max"] < tol,
            "peft_applies_expert_lora": cmp["peft_vs_full_reference_max"] < tol and cmp["expert_share_max"] > 10 * tol,
            "tolerance": tol,
        }
        log("verdict: %s" % report["verdict"])
        report["ok"] = True
    except Exception:
        report["error"] = traceback.format_exc()
        log(report["error"])
    save()
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
