#!/usr/bin/env python3
"""PyTorch bf16 MoE layer computed expert by expert (the baseline of kt bench --type moe).

For each token count: random bf16 experts [E, I, H] / [E, H, I], random top-k
routing, and the plain PyTorch MoE forward: for every expert with tokens,
h = silu(x_e @ gate_e^T) * (x_e @ up_e^T); out.index_add_(x_e's rows, (h @ down_e^T) * w).
Prints one JSON object per token count: {"tokens", "seconds", "tflops"}.
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
    ap.add_argument("--tokens", type=str, required=True)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    H, I, E, K = a.hidden, a.inter, a.experts, a.topk
    gate = (torch.randn(E, I, H) / H**0.5).to(torch.bfloat16)
    up = (torch.randn(E, I, H) / H**0.5).to(torch.bfloat16)
    down = (torch.randn(E, H, I) / I**0.5).to(torch.bfloat16)
    for T in [int(t) for t in a.tokens.split(",")]:
        x = torch.randn(T, H).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
        w = torch.softmax(torch.randn(T, K), dim=-1)

        def forward():
            out = torch.zeros(T, H, dtype=torch.float32)
            flat = ids.reshape(-1)
            order = torch.argsort(flat, stable=True)
            counts = torch.bincount(flat, minlength=E).tolist()
            tok = order // K
            wt = w.reshape(-1)[order]
            start = 0
            for e in range(E):
                n = counts[e]
                if n == 0:
                    continue
                rows = tok[start:start + n]
                xe = x[rows]
                h = torch.nn.functional.silu(xe @ gate[e].t()) * (xe @ up[e].t())
                y = (h @ down[e].t()).float() * wt[start:start + n, None]
                out.index_add_(0, rows, y)
                start += n
            return out

        forward()
        n, t0 = 0, time.perf_counter()
        while True:
            forward()
            n += 1
            el = time.perf_counter() - t0
            if el >= a.min_seconds and n >= 2:
                break
        sec = el / n
        flops = 2.0 * 3 * H * I * T * K
        print(json.dumps({"tokens": T, "seconds": sec, "tflops": flops / sec / 1e12}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
