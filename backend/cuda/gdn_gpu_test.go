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

// gdnInputs returns n rows of random gated-delta-rule inputs: the conv
// output q|k|v, the log decays g < 0 and the betas in (0, 1).
func gdnInputs(p *opPair, d backend.DeltaShape, n int) (qkv, g, beta []float32) {
	qkv = p.randF32(n*d.ConvChannels(), 1)
	g = make([]float32, n*d.VHeads)
	beta = make([]float32, n*d.VHeads)
	for i := range g {
		g[i] = float32(-math.Abs(p.rng.NormFloat64()) * 0.3)
		beta[i] = float32(1 / (1 + math.Exp(-p.rng.NormFloat64())))
	}
	return qkv, g, beta
}

// TestGatedDeltaChunked checks the GPU's chunked gated delta rule: a
// 300-token prompt prefilled at once equals, bit for bit, the same prompt
// prefilled in pieces that start and end inside chunks and on their
// boundaries (1, 62, 1, 64, 3, 105, 64), and both continue identically for
// decode steps run side by side in one step; outputs match the CPU
// backend's chunked form within 1e-4 (relative L2).
func TestGatedDeltaChunked(t *testing.T) {
	p := newOpPair(t)
	pieces := []int{1, 62, 1, 64, 3, 105, 64}
	total := 0
	for _, n := range pieces {
		total += n
	}
	for _, d := range []backend.DeltaShape{
		{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128}, // Qwen3-Next-80B / Qwen3.5
		{KHeads: 2, VHeads: 4, KDim: 32, VDim: 48},     // partial column block, two value heads per key head
	} {
		label := fmt.Sprintf("Hk=%d Hv=%d Dk=%d Dv=%d", d.KHeads, d.VHeads, d.KDim, d.VDim)
		sh := backend.LinearShape{Layers: 1, ConvKernel: 4, Delta: d}
		gst, err := p.g.AllocLinearState(sh, 2)
		if err != nil {
			t.Fatal(err)
		}
		cst, err := p.c.AllocLinearState(sh, 2)
		if err != nil {
			t.Fatal(err)
		}
		ch, vw := d.ConvChannels(), d.VHeads*d.VDim
		qkv, g, beta := gdnInputs(p, d, total)

		// One prefill (slot 0) on both backends.
		p.setStep(t, testStep([3]int{0, 0, total}))
		gx, cx := p.act(t, qkv, total, ch)
		gg, cg := p.act(t, g, total, d.VHeads)
		gb, cb := p.act(t, beta, total, d.VHeads)
		gout, cout := p.act(t, nil, total, vw)
		p.g.GatedDeltaRule(gout, gx, gg, gb, gst, 0, total)
		p.c.GatedDeltaRule(cout, cx, cg, cb, cst, 0, total)
		p.compare(t, "GatedDeltaRule prefill "+label, gout, cout, total, 1e-4)
		whole := make([]float32, total*vw)
		if err := p.g.Read(whole, gout, total); err != nil {
			t.Fatal(err)
		}

		// The same prompt in pieces (slot 1), GPU only.
		pos := 0
		for _, n := range pieces {
			if err := p.g.SetStep(testStep([3]int{1, pos, n})); err != nil {
				t.Fatal(err)
			}
			px, _ := p.act(t, qkv[pos*ch:(pos+n)*ch], n, ch)
			pg, _ := p.act(t, g[pos*d.VHeads:(pos+n)*d.VHeads], n, d.VHeads)
			pb, _ := p.act(t, beta[pos*d.VHeads:(pos+n)*d.VHeads], n, d.VHeads)
			po, _ := p.act(t, nil, n, vw)
			p.g.GatedDeltaRule(po, px, pg, pb, gst, 0, n)
			got := make([]float32, n*vw)
			if err := p.g.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := p.g.Read(got, po, n); err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				if w := whole[pos*vw+i]; math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("%s: piece at %d (+%d) row %d col %d: %v, one prefill %v", label, pos, n, i/vw, i%vw, v, w)
				}
			}
			pos += n
		}

		// Decode steps: both slots side by side in one step, same inputs.
		for step := 0; step < 3; step++ {
			s := testStep([3]int{0, total + step, 1}, [3]int{1, total + step, 1})
			p.setStep(t, s)
			dq, dg, db := gdnInputs(p, d, 1)
			dq = append(dq, dq...)
			dg = append(dg, dg...)
			db = append(db, db...)
			gx, cx := p.act(t, dq, 2, ch)
			gg, cg := p.act(t, dg, 2, d.VHeads)
			gb, cb := p.act(t, db, 2, d.VHeads)
			gout, cout := p.act(t, nil, 2, vw)
			p.g.GatedDeltaRule(gout, gx, gg, gb, gst, 0, 2)
			p.c.GatedDeltaRule(cout, cx, cg, cb, cst, 0, 2)
			if err := p.g.Sync(); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, 2*vw)
			if err := p.g.Read(got, gout, 2); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < vw; i++ {
				if math.Float32bits(got[i]) != math.Float32bits(got[vw+i]) {
					t.Fatalf("%s: decode %d col %d: slot 1 (pieces) %v, slot 0 (one prefill) %v", label, step, i, got[vw+i], got[i])
				}
			}
			// slot 1's CPU state is empty (it only ran on the GPU): compare row 0
			p.compare(t, fmt.Sprintf("GatedDeltaRule decode %d %s", step, label), gout, cout, 1, 1e-4)
		}
		t.Logf("RESULT %s: %d-token prefill in pieces %v bit-identical to one prefill, 3 decode steps identical", label, total, pieces)
	}
}

// BenchmarkGatedDeltaRule times the gated delta rule at Qwen3-Next's shape
// (Hk 16, Hv 32, 128x128) for a 4096-token prefill of one sequence and a
// decode step of 8 sequences (positions inside a chunk). ns/op includes
// the wait.
func BenchmarkGatedDeltaRule(b *testing.B) {
	p := newOpPair(b)
	d := backend.DeltaShape{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128}
	sh := backend.LinearShape{Layers: 1, ConvKernel: 4, Delta: d}
	g := p.g
	st, err := g.AllocLinearState(sh, 8)
	if err != nil {
		b.Fatal(err)
	}
	ch, vw := d.ConvChannels(), d.VHeads*d.VDim
	for _, c := range []struct {
		name    string
		seqs, n int
		pos     int
	}{{"prefill-4096", 1, 4096, 0}, {"decode-8x1", 8, 1, 1000}} {
		spans := make([][3]int, c.seqs)
		for i := range spans {
			spans[i] = [3]int{i, c.pos, c.n}
		}
		if err := g.SetStep(testStep(spans...)); err != nil {
			b.Fatal(err)
		}
		T := c.seqs * c.n
		qkv, gv, beta := gdnInputs(p, d, T)
		alloc := func(v []float32, cols int) *Tensor {
			x, err := g.Alloc(tensor.F32, T, cols)
			if err != nil {
				b.Fatal(err)
			}
			if err := g.write(x, v); err != nil {
				b.Fatal(err)
			}
			return x.(*Tensor)
		}
		x, gt, bt := alloc(qkv, ch), alloc(gv, d.VHeads), alloc(beta, d.VHeads)
		out := alloc(make([]float32, T*vw), vw)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				g.GatedDeltaRule(out, x, gt, bt, st, 0, T)
				if err := g.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestLinearDecodeKernels checks the decode-step kernels (m_conv1d_decode,
// m_gdn_decode) against the general ones (m_conv1d + m_conv_state,
// m_gdn_chunk + m_gdn_commit, b.generalOnly) bit for bit, outputs and the
// whole state after every step, and against the CPU backend (1e-4
// relative L2): decode steps of three sequences, one fresh (position 0),
// one crossing the 64-row chunk boundary (the flush at row 63), one deep
// in a chunk, after a prefill of the other two.
func TestLinearDecodeKernels(t *testing.T) {
	for _, d := range []backend.DeltaShape{
		{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128},
		{KHeads: 2, VHeads: 4, KDim: 32, VDim: 48},
	} {
		p := newOpPair(t)
		label := fmt.Sprintf("Hk=%d Hv=%d Dk=%d Dv=%d", d.KHeads, d.VHeads, d.KDim, d.VDim)
		const kern = 4
		sh := backend.LinearShape{Layers: 2, ConvKernel: kern, Delta: d}
		var st [3]backend.LinearState // general kernels, decode kernels, CPU
		for i := range st {
			be := backend.LinearAttention(p.g)
			if i == 2 {
				be = p.c
			}
			s, err := be.AllocLinearState(sh, 3)
			if err != nil {
				t.Fatal(err)
			}
			st[i] = s
		}
		ch, vw := d.ConvChannels(), d.VHeads*d.VDim
		cw, ccw := p.weight(t, "conv", tensor.F32, p.randF32(ch*kern, 0.5), ch, kern) // the models keep conv weights in f32 (the CPU op wants them so)
		steps := []*backend.Step{testStep([3]int{0, 0, 60}, [3]int{1, 0, 20})}
		for i := 0; i < 6; i++ {
			steps = append(steps, testStep([3]int{0, 60 + i, 1}, [3]int{1, 20 + i, 1}, [3]int{2, i, 1}))
		}
		for si, s := range steps {
			p.setStep(t, s)
			n := len(s.Tokens)
			xv := p.randF32(n*ch, 1)
			_, gv, bv := gdnInputs(p, d, n)
			var outs [3][]float32
			for i := range st {
				be := backend.LinearAttention(p.g)
				if i == 2 {
					be = p.c
				}
				p.g.generalOnly = i == 0
				w := cw
				if i == 2 {
					w = ccw
				}
				x, conv, g, beta, core := p.actOn(t, be, xv, n, ch), p.actOn(t, be, nil, n, ch), p.actOn(t, be, gv, n, d.VHeads), p.actOn(t, be, bv, n, d.VHeads), p.actOn(t, be, nil, n, vw)
				be.CausalConv1D(conv, x, w, st[i], 1, n)
				be.GatedDeltaRule(core, conv, g, beta, st[i], 1, n)
				outs[i] = p.readF32(t, be, core, n*vw)
				if i < 2 {
					c := p.readF32(t, be, conv, n*ch)
					outs[i] = append(outs[i], c...)
				}
			}
			p.g.generalOnly = false
			for j := range outs[0] {
				if math.Float32bits(outs[0][j]) != math.Float32bits(outs[1][j]) {
					t.Fatalf("%s step %d: output %d: decode kernels %v, general %v", label, si, j, outs[1][j], outs[0][j])
				}
			}
			checkClose(t, fmt.Sprintf("%s step %d vs CPU", label, si), f64s(outs[1][:n*vw]), f64s(outs[2]), 1e-4)
			ga, gb := st[0].(*linearState), st[1].(*linearState)
			for _, pair := range [][2]Buffer{{ga.conv, gb.conv}, {ga.delta, gb.delta}} {
				a, b := download[uint32](t, p.g.d, p.g.s, pair[0], int(pair[0].Size/4)), download[uint32](t, p.g.d, p.g.s, pair[1], int(pair[1].Size/4))
				for j := range a {
					if a[j] != b[j] {
						t.Fatalf("%s step %d: state word %d of %d: decode kernels %#x, general %#x", label, si, j, len(a), b[j], a[j])
					}
				}
			}
		}
		t.Logf("RESULT %s: %d decode steps bit-identical to the general kernels (outputs and state), within 1e-4 of the CPU", label, len(steps)-1)
	}
}

// actOn allocates an F32 activation on be (one of p's backends) holding v
// (zeros when v is nil).
func (p *opPair) actOn(t *testing.T, be backend.LinearAttention, v []float32, shape ...int) backend.Tensor {
	t.Helper()
	g, c := p.act(t, v, shape...)
	if be == backend.LinearAttention(p.c) {
		return c
	}
	return g
}

// readF32 reads the first n values of x from be (one of p's backends).
func (p *opPair) readF32(t *testing.T, be backend.LinearAttention, x backend.Tensor, n int) []float32 {
	t.Helper()
	if be == backend.LinearAttention(p.c) {
		if err := p.c.Sync(); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), x.(*cpu.Tensor).F32()[:n]...)
	}
	if err := p.g.Sync(); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	if err := p.g.Read(out, x, x.Shape()[0]); err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkLinearDecodeStep times a Qwen3.5-35B-A3B-shaped linear layer's
// decode ops (conv1d, gates, the gated delta rule, the gated norm; Hk 16,
// Hv 32, 128x128, positions inside a chunk) for 1 and 8 sequences, as
// replayed CUDA graphs of 6 layers: the general kernels (b.generalOnly)
// beside the decode-step kernels, so the ratio shows in one run. ns/op is
// one step of 6 layers including the wait.
func BenchmarkLinearDecodeStep(b *testing.B) {
	d := backend.DeltaShape{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128}
	const layers, kern = 6, 4
	for _, B := range []int{1, 8} {
		p := newOpPair(b)
		g := p.g
		st, err := g.AllocLinearState(backend.LinearShape{Layers: layers, ConvKernel: kern, Delta: d}, B)
		if err != nil {
			b.Fatal(err)
		}
		spans := make([][3]int, B)
		for i := range spans {
			spans[i] = [3]int{i, 1000 + 5*i, 1}
		}
		if err := g.SetStep(testStep(spans...)); err != nil {
			b.Fatal(err)
		}
		ch, vw := d.ConvChannels(), d.VHeads*d.VDim
		alloc := func(v []float32, rows, cols int) backend.Tensor { return devTensor(b, g, tensor.F32, v, rows, cols) }
		w, _ := p.weight(b, "conv", tensor.BF16, p.randF32(ch*kern, 0.5), ch, kern)
		aLog, _ := p.weight(b, "A_log", tensor.F32, p.randF32(d.VHeads, 0.5), d.VHeads)
		dtBias, _ := p.weight(b, "dt_bias", tensor.F32, p.randF32(d.VHeads, 0.5), d.VHeads)
		nw, _ := p.weight(b, "norm", tensor.BF16, p.randF32(d.VDim, 1), d.VDim)
		x, conv := alloc(p.randF32(B*ch, 1), B, ch), alloc(nil, B, ch)
		a, bb := alloc(p.randF32(B*d.VHeads, 1), B, d.VHeads), alloc(p.randF32(B*d.VHeads, 1), B, d.VHeads)
		gt, beta := alloc(nil, B, d.VHeads), alloc(nil, B, d.VHeads)
		core, z, out := alloc(nil, B*d.VHeads, d.VDim), alloc(p.randF32(B*vw, 1), B*d.VHeads, d.VDim), alloc(nil, B*d.VHeads, d.VDim)
		run := func() {
			for l := 0; l < layers; l++ {
				g.CausalConv1D(conv, x, w, st, l, B)
				g.DeltaGates(gt, beta, a, bb, aLog, dtBias, B)
				g.GatedDeltaRule(core, conv, gt, beta, st, l, B)
				g.GatedRMSNorm(out, core, z, nw, 1e-6, B*d.VHeads)
			}
		}
		benchGeneralVsNew(b, g, fmt.Sprintf("B=%d", B), "general-kernels", "decode-kernels", run)
	}
}
