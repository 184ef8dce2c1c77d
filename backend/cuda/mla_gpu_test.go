//go:build cgo

package cuda

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/tensor"
)

// mlaKVB hands the same kv_b_proj [rows, k] to both backends: dt's float
// values, or (fp8) block-scaled FP8 with blocks block.
func (p *opPair) mlaKVB(t *testing.T, dt tensor.DType, fp8 bool, block [2]int, rows, k int) (backend.Tensor, backend.Tensor) {
	t.Helper()
	v := p.randF32(rows*k, 1/math.Sqrt(float64(k)))
	if !fp8 {
		return p.weight(t, "kv_b_proj", dt, v, rows, k)
	}
	h, _, err := backend.QuantizeFP8("kv_b_proj", v, rows, k, block)
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.g.Weight(h)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.c.Weight(h)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}

// yarnFreqs are rope frequencies with a YaRN-like blend: the first pairs
// interpolated by 1/factor, the rest as the base gives them.
func yarnFreqs(rope int, theta float64, factor float32) []float32 {
	f := backend.Rope{HeadDim: rope, RotaryDim: rope, Theta: theta}.InvFreq()
	for i := range f[:len(f)/2] {
		f[i] /= factor
	}
	return f
}

// TestMLAttention checks MLAttention on the GPU (kernels/mla.cu) against
// the CPU backend through the steps the KV attention test uses (slots
// filled, a mixed step, a 600-token prompt, decode-only steps: one
// split-K partial per block up to many splits), for the fixtures' widths,
// DeepSeek-V3's per-head widths (rank 512, rope 64, nope and value 128)
// with fewer heads, and a shape with 5 heads and a rank no multiple of 32;
// kv_b_proj f32, bf16, f16 and block-scaled FP8 (blocks that do not divide
// the shape); interleaved and rotate-half rope with YaRN frequencies and
// an attention factor; rows cut into chunks of 7 (a prefill of many
// chunks). Outputs within 1e-4 relative L2 (the sums add in other
// orders), the latent caches within 1e-6; q and kv are left unchanged.
func TestMLAttention(t *testing.T) {
	p := newOpPair(t)
	defer func() { p.g.mlaChunkMax = 0 }()
	for _, c := range []struct {
		name  string
		s     backend.MLAShape
		dt    tensor.DType
		fp8   bool
		block [2]int
		inter bool
		chunk int
	}{
		{"fixture bf16", backend.MLAShape{Heads: 4, Nope: 32, RopeDim: 16, VDim: 24, Rank: 32}, tensor.BF16, false, [2]int{}, true, 0},
		{"fixture fp8 32x32", backend.MLAShape{Heads: 4, Nope: 32, RopeDim: 16, VDim: 24, Rank: 32}, 0, true, [2]int{32, 32}, true, 0},
		{"fixture f32 rotate-half", backend.MLAShape{Heads: 8, Nope: 32, RopeDim: 16, VDim: 24, Rank: 32}, tensor.F32, false, [2]int{}, false, 0},
		{"DeepSeek-V3 widths bf16", backend.MLAShape{Heads: 16, Nope: 128, RopeDim: 64, VDim: 128, Rank: 512}, tensor.BF16, false, [2]int{}, true, 0},
		{"DeepSeek-V3 widths fp8 128x128", backend.MLAShape{Heads: 16, Nope: 128, RopeDim: 64, VDim: 128, Rank: 512}, 0, true, [2]int{128, 128}, true, 0},
		{"odd f16 chunks of 7", backend.MLAShape{Heads: 5, Nope: 12, RopeDim: 8, VDim: 10, Rank: 40}, tensor.F16, false, [2]int{}, false, 7},
		{"odd fp8 20x24 chunks of 7", backend.MLAShape{Heads: 5, Nope: 12, RopeDim: 8, VDim: 10, Rank: 40}, 0, true, [2]int{20, 24}, true, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			p.g.mlaChunkMax = c.chunk
			gw, cw := p.mlaKVB(t, c.dt, c.fp8, c.block, s.Heads*(s.Nope+s.VDim), s.Rank)
			gn, cn := p.weight(t, "kv_a_layernorm", tensor.BF16, p.randF32(s.Rank, 0.3), s.Rank)
			prm := &backend.MLAParams{MLAShape: s, Scale: float32(0.7 / math.Sqrt(float64(s.Nope+s.RopeDim))), Eps: 1e-6,
				Rope: backend.MLARope{InvFreq: yarnFreqs(s.RopeDim, 10000, 4), AttnFactor: 1.2, Interleave: c.inter}}
			gc, err := p.g.AllocMLA(256, 16, s)
			if err != nil {
				t.Fatal(err)
			}
			cc, err := p.c.AllocMLA(256, 16, s)
			if err != nil {
				t.Fatal(err)
			}
			qw, W, ow := s.QWidth(), s.CacheWidth(), s.Heads*s.VDim
			for _, st := range []*backend.Step{stepFill, stepMixed, stepLong, stepDecode, stepDecode1} {
				p.setStep(t, st)
				m := len(st.Tokens)
				qv, kvv := p.randF32(m*qw, 1), p.randF32(m*W, 1)
				gq, cq := p.act(t, qv, m, qw)
				gkv, ckv := p.act(t, kvv, m, W)
				gout, cout := p.act(t, nil, m, ow)
				p.g.MLAttention(gout, gq, gkv, gn, gw, gc, prm, m)
				p.c.MLAttention(cout, cq, ckv, cn, cw, cc, prm, m)
				p.compare(t, fmt.Sprintf("MLAttention %d rows", m), gout, cout, m, 1e-4)
				p.compare(t, fmt.Sprintf("latent cache after %d rows", m), gc.Latent, cc.Latent, 256*16, 1e-6)
				p.compare(t, "q unchanged", gq, cq, m, 0)
				p.compare(t, "kv unchanged", gkv, ckv, m, 0)
			}
		})
	}
}

// TestMLAttentionRefuses checks MLAttention's argument checks on the GPU:
// a kv_b_proj of the wrong shape and a step whose rows differ from n are
// errors naming the op, and the next step starts clean.
func TestMLAttentionRefuses(t *testing.T) {
	p := newOpPair(t)
	s := backend.MLAShape{Heads: 2, Nope: 8, RopeDim: 4, VDim: 8, Rank: 16}
	prm := &backend.MLAParams{MLAShape: s, Scale: 0.3, Eps: 1e-6, Rope: backend.MLARope{InvFreq: []float32{1, 0.1}, AttnFactor: 1}}
	c, err := p.g.AllocMLA(16, 16, s)
	if err != nil {
		t.Fatal(err)
	}
	step := testStep([3]int{0, 0, 3})
	step.Seqs[0].Pages = step.Seqs[0].Pages[:1]
	p.setStep(t, step)
	gn, _ := p.weight(t, "norm", tensor.F32, p.randF32(16, 1), 16)
	good, _ := p.weight(t, "kv_b_proj", tensor.BF16, p.randF32(32*16, 0.1), 32, 16)
	bad, _ := p.weight(t, "kv_b_proj", tensor.BF16, p.randF32(30*16, 0.1), 30, 16)
	q, _ := p.act(t, p.randF32(3*s.QWidth(), 1), 3, s.QWidth())
	kv, _ := p.act(t, p.randF32(3*s.CacheWidth(), 1), 3, s.CacheWidth())
	out, _ := p.act(t, nil, 3, s.Heads*s.VDim)
	for _, tc := range []struct {
		name string
		run  func()
		want string
	}{
		{"kv_b_proj shape", func() { p.g.MLAttention(out, q, kv, gn, bad, c, prm, 3) }, "kv_b_proj"},
		{"rows", func() { p.g.MLAttention(out, q, kv, gn, good, c, prm, 2) }, "2 rows but the step has 3"},
	} {
		tc.run()
		if err := p.g.Sync(); err == nil || !strings.Contains(err.Error(), "MLAttention") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Sync returned %v, want an MLAttention error about %q", tc.name, err, tc.want)
		}
	}
	p.g.MLAttention(out, q, kv, gn, good, c, prm, 3)
	if err := p.g.Sync(); err != nil {
		t.Fatalf("a good call after the errors: %v", err)
	}
}

// TestRouterGroupTopK checks m_router_group_topk against the CPU backend's
// RouterGroupTopK on logits with many ties: DeepSeek-V3 (256 experts, 8
// groups, 4 eligible, top 8), Kimi-K2 (384 experts, one group), the
// fixtures' shapes, 32 groups of 2; f32 and bf16 biases; negative biases
// (masked experts, at 0, chosen over eligible ones); renormalised or not,
// scaled; padding rows (the step's Live) routed nowhere. Ids must be equal,
// weights within 1e-6 relative (the sigmoid's float64 exp).
func TestRouterGroupTopK(t *testing.T) {
	p := newOpPair(t)
	n := len(stepMixed.Tokens)
	for _, c := range []struct {
		e    int
		g    backend.GroupRoute
		bias tensor.DType
		neg  bool
		live int
	}{
		{256, backend.GroupRoute{K: 8, Groups: 8, TopKGroups: 4, Norm: true, Scale: 2.5}, tensor.F32, false, 0},
		{384, backend.GroupRoute{K: 8, Groups: 1, TopKGroups: 1, Norm: true, Scale: 2.827}, tensor.F32, false, 0},
		{16, backend.GroupRoute{K: 4, Groups: 4, TopKGroups: 2, Norm: true, Scale: 2.5}, tensor.BF16, false, 0},
		{24, backend.GroupRoute{K: 6, Groups: 1, TopKGroups: 1, Norm: false, Scale: 2.827}, tensor.BF16, false, n - 3},
		{32, backend.GroupRoute{K: 6, Groups: 8, TopKGroups: 3, Norm: true, Scale: 1}, tensor.F32, true, 0},
		{64, backend.GroupRoute{K: 7, Groups: 32, TopKGroups: 5, Norm: false, Scale: 1}, tensor.F32, true, n - 1},
	} {
		name := fmt.Sprintf("E=%d %+v bias %s negative=%v live=%d", c.e, c.g, c.bias, c.neg, c.live)
		t.Run(name, func(t *testing.T) {
			padded := *stepMixed
			padded.Live = c.live
			p.setStep(t, &padded)
			defer p.setStep(t, stepMixed)
			lv := p.randF32(n*c.e, 2)
			for i := range lv {
				lv[i] = float32(math.Round(float64(lv[i])*2) / 2) // ties
			}
			bv := p.randF32(c.e, 0.05)
			for i := range bv {
				bv[i] = float32(math.Round(float64(bv[i])*64) / 64)
				if c.neg {
					bv[i] -= 2
				}
			}
			gb, cb := p.weight(t, "e_score_correction_bias", c.bias, bv, c.e)
			gl, cl := p.act(t, lv, n, c.e)
			k := c.g.K
			gw, cw := p.act(t, nil, n, k)
			gi, ci := p.ids(t, n, k)
			p.g.RouterGroupTopK(gw, gi, gl, gb, &c.g, n)
			p.c.RouterGroupTopK(cw, ci, cl, cb, &c.g, n)
			p.compare(t, "weights", gw, cw, n, 1e-6)
			got := make([]int32, n*k)
			if err := p.g.ReadI32(got, gi, n*k); err != nil {
				t.Fatal(err)
			}
			for i, want := range ci.(*cpu.Tensor).I32()[:n*k] {
				if got[i] != want {
					t.Fatalf("ids[%d] = %d, CPU %d", i, got[i], want)
				}
				if c.live > 0 && (i >= c.live*k) != (got[i] < 0) {
					t.Fatalf("ids[%d] = %d: padding rows (from %d) must route nowhere, the others somewhere", i, got[i], c.live)
				}
			}
		})
	}
}
