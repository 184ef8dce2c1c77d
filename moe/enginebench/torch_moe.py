#!/usr/bin/env python3
"""PyTorch bf16 MoE layer computed expert by expert (the baseline of kt bench --type moe).

For each token count: random bf16 experts [E, I, H] / [E, H, I], random top-k
routing, and the plain PyTorch MoE forward in two forms, each timed with
--threads threads and with PyTorch's default thread count (all cores); the
fastest of the four is reported, so the baseline is PyTorch at its best here:
  index: for every expert with tokens, h = silu(x_e @ gate_e^T) * (x_e @ up_e^T);
         out.index_add_(x_e's rows, (h @ down_e^T) * w) in f32;
  fused: transformers 5's expert loop: one F.linear over the fused [2I, H]
         gate_up weight, chunk, silu(g) * u, F.linear with down, bf16 index_add_.
Prints one JSON object per token count:
{"tokens", "seconds", "tflops", "variant", "threads", "all": {variant@threads: tflops}}.
With --serve it builds the weights once and then measures the token count
given on each line of stdin (routing seeded by the token count, so repeated
requests see the same batch): kt bench --rounds interleaves these
measurements with the engine's.
"""
import argparse
import json
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--inter", type=int, required=True)
    ap.add_argument("--experts", type=int, required=True)
    ap.add_argument("--topk", type=int, required=True)
    ap.add_argument("--tokens", type=str, default="")
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    a = ap.parse_args()
    default_threads = torch.get_num_threads()
    thread_counts = sorted({t for t in (a.threads, default_threads) if t > 0})
    torch.manual_seed(0)
    H, I, E, K = a.hidden, a.inter, a.experts, a.topk
    # drawn in bf16 and scaled in place: no f32 copy of a stack (15 GB each
    # on DeepSeek-V3's layer)
    gate = torch.randn(E, I, H, dtype=torch.bfloat16).mul_(H**-0.5)
    up = torch.randn(E, I, H, dtype=torch.bfloat16).mul_(H**-0.5)
    down = torch.randn(E, H, I, dtype=torch.bfloat16).mul_(I**-0.5)
    gate_up = torch.cat([gate, up], dim=1).contiguous()  # [E, 2I, H]

    def measure(T):
        torch.manual_seed(T)
        x = torch.randn(T, H).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
        w = torch.softmax(torch.randn(T, K), dim=-1)

        def route():
            flat = ids.reshape(-1)
            order = torch.argsort(flat, stable=True)
            counts = torch.bincount(flat, minlength=E).tolist()
            return order // K, w.reshape(-1)[order], counts

        def expert_loop(out_dtype, expert):
            # the plain MoE loop: route, then for every expert with tokens
            # add expert(e, its rows, their weights) at those rows
            out = torch.zeros(T, H, dtype=out_dtype)
            tok, wt, counts = route()
            start = 0
            for e in range(E):
                n = counts[e]
                if n == 0:
                    continue
                rows = tok[start:start + n]
                out.index_add_(0, rows, expert(e, x[rows], wt[start:start + n, None]))
                start += n
            return out

        def index_expert(e, xe, we):
            h = torch.nn.functional.silu(xe @ gate[e].t()) * (xe @ up[e].t())
            return (h @ down[e].t()).float() * we

        def fused_expert(e, xe, we):
            g, u = torch.nn.functional.linear(xe, gate_up[e]).chunk(2, dim=-1)
            y = torch.nn.functional.linear(torch.nn.functional.silu(g) * u, down[e])
            return y * we.to(torch.bfloat16)

        def index_form():
            return expert_loop(torch.float32, index_expert)

        def fused_form():
            return expert_loop(torch.bfloat16, fused_expert)

        flops = 2.0 * 3 * H * I * T * K
        best, timings = None, {}
        for name, forward in (("index", index_form), ("fused", fused_form)):
            for th in thread_counts:
                torch.set_num_threads(th)
                forward()
                n, t0 = 0, time.perf_counter()
                while True:
                    forward()
                    n += 1
                    el = time.perf_counter() - t0
                    if el >= a.min_seconds and n >= 2:
                        break
                sec = el / n
                timings["%s@%d" % (name, th)] = round(flops / sec / 1e12, 4)
                if best is None or sec < best[0]:
                    best = (sec, name, th)
        sec, name, th = best
        print(json.dumps({"tokens": T, "seconds": sec, "tflops": flops / sec / 1e12, "variant": name,
                          "threads": th, "all": timings}), flush=True)

    if a.serve:
        for line in sys.stdin:
            if line.strip():
                measure(int(line))
        return
    for T in [int(t) for t in a.tokens.split(",") if t]:
        measure(T)


if __name__ == "__main__":
    sys.exit(main())
