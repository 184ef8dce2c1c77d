//go:build cgo

package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/tensor"
)

// readRows syncs p's GPU backend and reads rows of x (F32).
func (p *opPair) readRows(t *testing.T, x backend.Tensor, rows int) []float32 {
	t.Helper()
	if err := p.g.Sync(); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, rows*x.Shape()[len(x.Shape())-1])
	if err := p.g.Read(out, x, rows); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNormKernels checks the one-pass norms (m_rmsnorm_vec,
// m_rmsnorm_warp, m_gated_rmsnorm_warp) against the general kernels
// (b.generalOnly; 1e-6 relative L2, the sums add in another order) and the
// CPU backend (1e-5), for bf16 and f32 weights and the widths the models
// use (2048 hidden rows, 128-wide heads) plus a width no float4 kernel
// takes (a general kernel either way).
func TestNormKernels(t *testing.T) {
	p := newOpPair(t)
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
		for _, c := range []struct{ rows, d int }{{1, 2048}, {8, 2048}, {3, 4096}, {64, 128}, {5, 36}, {2, 1001}} {
			label := fmt.Sprintf("%v %dx%d", dt, c.rows, c.d)
			gw, cw := p.weight(t, "w", dt, p.randF32(c.d, 1), c.d)
			gx, cx := p.act(t, p.randF32(c.rows*c.d, 2), c.rows, c.d)
			gz, cz := p.act(t, p.randF32(c.rows*c.d, 2), c.rows, c.d)
			for _, gated := range []bool{false, true} {
				run := func(be interface {
					backend.Ops
					backend.LinearAttention
				}, out, x, z, w backend.Tensor) {
					if gated {
						be.GatedRMSNorm(out, x, z, w, 1e-6, c.rows)
					} else {
						be.RMSNorm(out, x, w, 1e-6, c.rows)
					}
				}
				name := label + map[bool]string{false: " rmsnorm", true: " gated"}[gated]
				gOld, _ := p.act(t, nil, c.rows, c.d)
				gNew, cOut := p.act(t, nil, c.rows, c.d)
				p.g.generalOnly = true
				run(p.g, gOld, gx, gz, gw)
				p.g.generalOnly = false
				run(p.g, gNew, gx, gz, gw)
				run(p.c, cOut, cx, cz, cw)
				checkClose(t, name+" vs general", f64s(p.readRows(t, gNew, c.rows)), f64s(p.readRows(t, gOld, c.rows)), 1e-6)
				p.compare(t, name+" vs CPU", gNew, cOut, c.rows, 1e-5)
			}
		}
	}
}

// TestRouterTopKReg checks m_router_topk_reg (E ≤ 256) against
// m_router_topk_warp bit for bit (ids and weights) and the CPU backend
// (ids equal, weights within 4e-6: the sums add in other orders), on logits with many ties, for 1, 5
// and 8 rows and E = 256, 128, 200 (a partial last register), k = 8, 16.
func TestRouterTopKReg(t *testing.T) {
	p := newOpPair(t)
	for _, c := range []struct{ n, e, k int }{{1, 256, 8}, {5, 256, 8}, {8, 256, 8}, {3, 128, 8}, {4, 200, 16}} {
		for _, norm := range []bool{true, false} {
			label := fmt.Sprintf("n=%d E=%d k=%d norm=%v", c.n, c.e, c.k, norm)
			lv := p.randF32(c.n*c.e, 4)
			for i := range lv {
				lv[i] = float32(math.Round(float64(lv[i])*2) / 2) // ties
			}
			gl, cl := p.act(t, lv, c.n, c.e)
			gw, cw := p.act(t, nil, c.n, c.k)
			gi, ci := p.ids(t, c.n, c.k)
			p.g.RouterTopK(gw, gi, gl, c.k, norm, c.n)
			p.c.RouterTopK(cw, ci, cl, c.k, norm, c.n)
			ww, _ := p.act(t, nil, c.n, c.k)
			wid, _ := p.ids(t, c.n, c.k)
			nm := 0
			if norm {
				nm = 1
			}
			gt, wt, it := gl.(*Tensor), ww.(*Tensor), wid.(*Tensor)
			p.g.check("m_router_topk_warp", p.g.d.launch(p.g.s, "m_router_topk_warp", grid1(blocks(c.n, 4)), grid1(128), 20*c.e, wt.buf, it.buf, gt.buf, c.n, c.e, c.k, nm, uint64(0)))
			got, want := p.readRows(t, gw, c.n), p.readRows(t, ww, c.n)
			gids, wids := make([]int32, c.n*c.k), make([]int32, c.n*c.k)
			if err := p.g.ReadI32(gids, gi, c.n*c.k); err != nil {
				t.Fatal(err)
			}
			if err := p.g.ReadI32(wids, wid, c.n*c.k); err != nil {
				t.Fatal(err)
			}
			if err := p.c.Sync(); err != nil {
				t.Fatal(err)
			}
			cids, cwts := ci.(*cpu.Tensor).I32(), cw.(*cpu.Tensor).F32()
			for j := range got {
				if gids[j] != wids[j] || math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("%s: [%d]: id %d weight %v, m_router_topk_warp id %d weight %v", label, j, gids[j], got[j], wids[j], want[j])
				}
				if gids[j] != cids[j] || math.Abs(float64(got[j]-cwts[j])) > 4e-6*math.Abs(float64(cwts[j])) {
					t.Fatalf("%s: [%d]: id %d weight %v, CPU id %d weight %v", label, j, gids[j], got[j], cids[j], cwts[j])
				}
			}
		}
	}
}

// BenchmarkDecodeNormRouter times the per-step small kernels of a
// Qwen3.5-35B-A3B-shaped decode (batch 1 and 8): RMSNorm of 2048-wide
// rows, the gated norm over 32 value heads x 128, the router (E 256, k 8),
// each as a replayed CUDA graph of 16 launches, the general kernels
// (b.generalOnly) beside the new ones. ns/op is 16 launches and the wait.
func BenchmarkDecodeNormRouter(b *testing.B) {
	p := newOpPair(b)
	g := p.g
	alloc := func(dt tensor.DType, v []float32, rows, cols int) backend.Tensor {
		return devTensor(b, g, dt, v, rows, cols)
	}
	for _, B := range []int{1, 8} {
		nw, _ := p.weight(b, "norm", tensor.BF16, p.randF32(2048, 1), 2048)
		hw, _ := p.weight(b, "head norm", tensor.BF16, p.randF32(128, 1), 128)
		x, out := alloc(tensor.F32, p.randF32(B*2048, 1), B, 2048), alloc(tensor.F32, nil, B, 2048)
		hx, hz, hout := alloc(tensor.F32, p.randF32(B*32*128, 1), B*32, 128), alloc(tensor.F32, p.randF32(B*32*128, 1), B*32, 128), alloc(tensor.F32, nil, B*32, 128)
		lg, wts, ids := alloc(tensor.F32, p.randF32(B*256, 2), B, 256), alloc(tensor.F32, nil, B, 8), alloc(tensor.I32, nil, B, 8)
		for _, op := range []struct {
			name string
			fn   func()
		}{
			{"rmsnorm-2048", func() { g.RMSNorm(out, x, nw, 1e-6, B) }},
			{"gated-rmsnorm-32x128", func() { g.GatedRMSNorm(hout, hx, hz, hw, 1e-6, B*32) }},
			{"router-256-top8", func() { g.RouterTopK(wts, ids, lg, 8, true, B) }},
		} {
			benchGeneralVsNew(b, g, fmt.Sprintf("B=%d/%s", B, op.name), "general", "new", func() {
				for range 16 {
					op.fn()
				}
			})
		}
	}
}
