import time, torch, sys, json
import torch.nn.functional as F
H,I,E,K = [int(v) for v in sys.argv[1:5]]
torch.manual_seed(0)
print("torch", torch.__version__, "threads", torch.get_num_threads(), "mkldnn", torch.backends.mkldnn.is_available(), flush=True)
try:
    print(torch.__config__.show().split("\n")[0:3])
except Exception as e: print(e)
gate = (torch.randn(E, I, H) / H**0.5).to(torch.bfloat16)
up = (torch.randn(E, I, H) / H**0.5).to(torch.bfloat16)
down = (torch.randn(E, H, I) / I**0.5).to(torch.bfloat16)
gu = torch.cat([gate, up], dim=1).contiguous()  # [E, 2I, H] as transformers' fused gate_up
gT = gate.transpose(1,2).contiguous(); uT = up.transpose(1,2).contiguous(); dT = down.transpose(1,2).contiguous()
def mk(T):
    x = torch.randn(T, H).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
    w = torch.softmax(torch.randn(T, K), dim=-1)
    return x, ids, w
def route(ids, w):
    flat = ids.reshape(-1); order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=E).tolist()
    return order // K, w.reshape(-1)[order], counts
def v_cur(x, ids, w):  # kt's torch_moe.py
    out = torch.zeros(x.shape[0], H, dtype=torch.float32); tok, wt, counts = route(ids, w); s = 0
    for e in range(E):
        n = counts[e]
        if n == 0: continue
        rows = tok[s:s+n]; xe = x[rows]
        h = F.silu(xe @ gate[e].t()) * (xe @ up[e].t())
        out.index_add_(0, rows, (h @ down[e].t()).float() * wt[s:s+n, None]); s += n
    return out
def v_linear(x, ids, w):  # F.linear per expert (nn.Linear experts)
    out = torch.zeros(x.shape[0], H, dtype=x.dtype); tok, wt, counts = route(ids, w); s = 0
    for e in range(E):
        n = counts[e]
        if n == 0: continue
        rows = tok[s:s+n]; xe = x[rows]
        h = F.silu(F.linear(xe, gate[e])) * F.linear(xe, up[e])
        out.index_add_(0, rows, F.linear(h, down[e]) * wt[s:s+n, None].to(x.dtype)); s += n
    return out
def v_fused(x, ids, w):  # transformers-5 style fused gate_up
    out = torch.zeros(x.shape[0], H, dtype=x.dtype); tok, wt, counts = route(ids, w); s = 0
    for e in range(E):
        n = counts[e]
        if n == 0: continue
        rows = tok[s:s+n]; xe = x[rows]
        g, u = F.linear(xe, gu[e]).chunk(2, dim=-1)
        out.index_add_(0, rows, F.linear(F.silu(g) * u, down[e]) * wt[s:s+n, None].to(x.dtype)); s += n
    return out
def v_mm(x, ids, w):  # contiguous [H,I] weights, plain mm
    out = torch.zeros(x.shape[0], H, dtype=x.dtype); tok, wt, counts = route(ids, w); s = 0
    for e in range(E):
        n = counts[e]
        if n == 0: continue
        rows = tok[s:s+n]; xe = x[rows]
        h = F.silu(xe @ gT[e]) * (xe @ uT[e])
        out.index_add_(0, rows, (h @ dT[e]) * wt[s:s+n, None].to(x.dtype)); s += n
    return out
for T in [1, 4096]:
    x, ids, w = mk(T)
    ref = v_cur(x, ids, w)
    for name, f in [("cur", v_cur), ("linear", v_linear), ("fused", v_fused), ("mm", v_mm)]:
        for th in [15, 16]:
            torch.set_num_threads(th)
            o = f(x, ids, w)
            err = ((o.float()-ref).norm()/ref.norm()).item()
            n, t0 = 0, time.perf_counter()
            while True:
                f(x, ids, w); n += 1; el = time.perf_counter()-t0
                if el >= 0.4 and n >= 2: break
            sec = el/n; fl = 2.0*3*H*I*T*K
            print(json.dumps({"T": T, "v": name, "threads": th, "ms": round(sec*1e3,3), "tflops": round(fl/sec/1e12,3), "GBs_w": round(min(T*K,E)*3*H*I*2/sec/1e9,1), "relerr": round(err,4)}), flush=True)
