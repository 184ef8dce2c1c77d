//go:build cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/tensor"
)

// The backend.Backend ops on the GPU against the CPU backend (the
// reference) on random inputs at the real models' shapes. Tolerances are
// relative L2 errors over the whole output:
//
//   - MatMul with 16-bit weights: 1e-4 (the activations are split into two
//     bf16/f16 halves for the tensor-core GEMM); f32 weights: 1e-5.
//   - everything else reads the same float32 activations and weights and
//     differs only in summation order: 1e-5, attention and the gated delta
//     rule (the CPU runs its chunked form) 1e-4; router ids must be equal.

// opPair drives the same ops on the GPU and the CPU backend.
type opPair struct {
	g   *Backend
	c   *cpu.Backend
	rng *rand.Rand
}

func newOpPair(t testing.TB) *opPair {
	d := testDevice(t)
	g, err := NewBackendOn(d)
	if err != nil {
		t.Fatal(err)
	}
	c := cpu.New(cpu.Options{})
	t.Cleanup(func() { g.Close(); c.Close() })
	return &opPair{g: g, c: c, rng: rand.New(rand.NewPCG(7, 11))}
}

func (p *opPair) randF32(n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(p.rng.NormFloat64() * scale)
	}
	return out
}

// f16Bits rounds f to IEEE half precision (normal range; tests only).
func f16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	e := int((b>>23)&0xff) - 127 + 15
	if e <= 0 {
		return sign
	}
	if e >= 31 {
		return sign | 0x7bff
	}
	m := b & 0x7fffff
	h := uint32(e)<<10 | m>>13
	if r := m & 0x1fff; r > 0x1000 || (r == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

// weight hands the same weight (values rounded to dt) to both backends.
func (p *opPair) weight(t testing.TB, name string, dt tensor.DType, v []float32, shape ...int) (backend.Tensor, backend.Tensor) {
	t.Helper()
	data := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		switch dt {
		case tensor.F32:
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		case tensor.BF16:
			binary.LittleEndian.PutUint16(data[2*i:], tensor.F32ToBF16(x))
		case tensor.F16:
			binary.LittleEndian.PutUint16(data[2*i:], f16Bits(x))
		}
	}
	h := backend.Host{Name: name, DType: dt, Shape: shape, Data: data}
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

// act allocates an F32 activation on both backends holding v (zeros when v
// is nil).
func (p *opPair) act(t *testing.T, v []float32, shape ...int) (backend.Tensor, backend.Tensor) {
	t.Helper()
	g, err := p.g.Alloc(tensor.F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.c.Alloc(tensor.F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := p.g.write(g, v); err != nil {
			t.Fatal(err)
		}
		copy(c.(*cpu.Tensor).F32(), v)
	}
	return g, c
}

func (p *opPair) ids(t *testing.T, shape ...int) (backend.Tensor, backend.Tensor) {
	t.Helper()
	g, err := p.g.Alloc(tensor.I32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.c.Alloc(tensor.I32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}

func (p *opPair) setStep(t *testing.T, s *backend.Step) {
	t.Helper()
	if err := p.g.SetStep(s); err != nil {
		t.Fatal(err)
	}
	if err := p.c.SetStep(s); err != nil {
		t.Fatal(err)
	}
}

// compare reads rows of both tensors and checks the relative L2 error.
func (p *opPair) compare(t *testing.T, name string, g, c backend.Tensor, rows int, tol float64) {
	t.Helper()
	if err := p.g.Sync(); err != nil {
		t.Fatalf("%s: GPU: %v", name, err)
	}
	if err := p.c.Sync(); err != nil {
		t.Fatalf("%s: CPU: %v", name, err)
	}
	w := g.Shape()[len(g.Shape())-1]
	gv := make([]float32, rows*w)
	if err := p.g.Read(gv, g, rows); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cv := c.(*cpu.Tensor).F32()[:rows*w]
	got, want := make([]float64, len(gv)), make([]float64, len(cv))
	for i := range gv {
		got[i], want[i] = float64(gv[i]), float64(cv[i])
	}
	checkClose(t, name, got, want, tol)
}

// sameBits checks that rows of two GPU tensors hold the same bits.
func sameBits(t *testing.T, p *opPair, name string, a, b backend.Tensor, rows int) {
	t.Helper()
	w := a.Shape()[len(a.Shape())-1]
	av, bv := make([]float32, rows*w), make([]float32, rows*w)
	if err := p.g.Read(av, a, rows); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := p.g.Read(bv, b, rows); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for i := range av {
		if math.Float32bits(av[i]) != math.Float32bits(bv[i]) {
			t.Fatalf("%s: element %d is %g, want %g", name, i, av[i], bv[i])
		}
	}
}

// testStep builds a step of several sequences: each (slot, pos, len) with
// its own pages (page size 16, slot s owns pages [s*64, s*64+64)).
func testStep(spans ...[3]int) *backend.Step {
	s := &backend.Step{}
	for _, sp := range spans {
		slot, pos, n := sp[0], sp[1], sp[2]
		start := len(s.Tokens)
		for j := 0; j < n; j++ {
			s.Tokens = append(s.Tokens, int32((slot*7919+pos+j)%1000))
			s.Pos = append(s.Pos, int32(pos+j))
		}
		pages := make([]int32, 64)
		for i := range pages {
			pages[i] = int32(slot*64 + i)
		}
		s.Seqs = append(s.Seqs, backend.Seq{Slot: slot, Start: start, Len: n, Pos: pos, Pages: pages})
		s.OutRows = append(s.OutRows, int32(len(s.Tokens)-1))
	}
	return s
}

// Two steps used by the ops that keep state (KV cache, conv and delta
// state): a first one that fills slots 1 and 2, then a mixed one: a fresh
// prompt (slot 0), a prefill chunk continuing slot 1, a decode on slot 2.
var (
	stepFill  = testStep([3]int{1, 0, 50}, [3]int{2, 0, 200})
	stepMixed = testStep([3]int{0, 0, 37}, [3]int{1, 50, 20}, [3]int{2, 200, 1})
	// After those (Attention): a long prompt, then decode-only steps.
	stepLong    = testStep([3]int{3, 0, 600})
	stepDecode  = testStep([3]int{3, 600, 1}, [3]int{1, 70, 1}, [3]int{2, 201, 1})
	stepDecode1 = testStep([3]int{3, 601, 1})
)

func TestBackendOps(t *testing.T) {
	p := newOpPair(t)
	const maxT = 256
	p.setStep(t, stepMixed)
	n := len(stepMixed.Tokens)

	t.Run("Embed", func(t *testing.T) {
		const V, H = 1000, 2048
		gw, cw := p.weight(t, "embed", tensor.BF16, p.randF32(V*H, 1), V, H)
		go_, co := p.act(t, nil, maxT, H)
		p.g.Embed(go_, gw)
		p.c.Embed(co, cw)
		p.compare(t, "Embed bf16 [1000,2048]", go_, co, n, 0)
	})

	t.Run("MatMul", func(t *testing.T) {
		for _, c := range []struct {
			dt   tensor.DType
			o, k int
			tol  float64
		}{
			{tensor.BF16, 4096, 2048, 1e-4}, // Qwen3-30B q_proj
			{tensor.BF16, 2048, 4096, 1e-4}, // o_proj
			{tensor.BF16, 128, 2048, 1e-4},  // router
			{tensor.BF16, 1, 2048, 1e-4},    // shared expert gate (N = 1)
			{tensor.BF16, 4, 64, 1e-4},      // tiny fixture's in_proj_b
			{tensor.F16, 1536, 2048, 1e-4},
			{tensor.F32, 512, 2048, 1e-5},
			{tensor.F32, 96, 64, 1e-5},
		} {
			name := fmt.Sprintf("MatMul %s [%d,%d] x %d rows", c.dt, c.o, c.k, n)
			gw, cw := p.weight(t, "w", c.dt, p.randF32(c.o*c.k, 0.02), c.o, c.k)
			gx, cx := p.act(t, p.randF32(maxT*c.k, 1), maxT, c.k)
			gout, cout := p.act(t, nil, maxT, c.o)
			p.g.MatMul(gout, gx, gw, n)
			p.c.MatMul(cout, cx, cw, n)
			p.compare(t, name, gout, cout, n, c.tol)
		}
	})

	// Decode-sized MatMuls (1..8 rows) take m_gemv_bf16: against the CPU,
	// and against the split GEMM that larger chunks take (generalOnly
	// sends these rows there too). Both compute the hi and lo parts on the
	// tensor cores, whose float32 accumulation rounds differently for other
	// k orders (H100: 1.9e-6 relative L2 between the two at [4096,2048],
	// each ~2-3e-6 from the CPU's float32 product); this bound only catches
	// gross errors: TestChunkedPrefill is the consistency check that
	// matters.
	t.Run("MatMulRows", func(t *testing.T) {
		defer func() { p.g.generalOnly = false }()
		for _, c := range []struct{ o, k int }{{4096, 2048}, {2048, 4096}, {37, 264}, {1, 2048}, {512, 8}} {
			gw, cw := p.weight(t, "w", tensor.BF16, p.randF32(c.o*c.k, 0.02), c.o, c.k)
			gx, cx := p.act(t, p.randF32(maxT*c.k, 1), maxT, c.k)
			gout, cout := p.act(t, nil, maxT, c.o)
			gref, _ := p.act(t, nil, maxT, c.o)
			for _, rows := range []int{1, 2, 4, 5, 8} {
				name := fmt.Sprintf("MatMul bf16 [%d,%d] x %d rows", c.o, c.k, rows)
				p.g.generalOnly = false
				p.g.MatMul(gout, gx, gw, rows)
				p.c.MatMul(cout, cx, cw, rows)
				p.compare(t, name, gout, cout, rows, 1e-4)
				p.g.generalOnly = true
				p.g.MatMul(gref, gx, gw, rows)
				if p.g.gemmRefused(gemmShape{2 * rows, c.o, c.k, tensor.BF16}) {
					continue // no cuBLASLt algorithm: the exact float32 kernel, not the split
				}
				got, want := make([]float32, rows*c.o), make([]float32, rows*c.o)
				if err := p.g.Read(got, gout, rows); err != nil {
					t.Fatal(err)
				}
				if err := p.g.Read(want, gref, rows); err != nil {
					t.Fatal(err)
				}
				g64, w64 := make([]float64, len(got)), make([]float64, len(want))
				for i := range got {
					g64[i], w64[i] = float64(got[i]), float64(want[i])
				}
				checkClose(t, name+" gemv vs split GEMM", g64, w64, 1e-5)
			}
		}
	})

	t.Run("RMSNorm", func(t *testing.T) {
		for _, c := range []struct {
			d, rowsPer int
			dt         tensor.DType
		}{{2048, 1, tensor.BF16}, {128, 32, tensor.BF16}, {256, 16, tensor.F32}} {
			gw, cw := p.weight(t, "norm", c.dt, p.randF32(c.d, 1), c.d)
			gx, cx := p.act(t, p.randF32(maxT*c.d*c.rowsPer, 3), maxT, c.d*c.rowsPer)
			gout, cout := p.act(t, nil, maxT, c.d*c.rowsPer)
			p.g.RMSNorm(gout, gx, gw, 1e-6, n*c.rowsPer)
			p.c.RMSNorm(cout, cx, cw, 1e-6, n*c.rowsPer)
			p.compare(t, fmt.Sprintf("RMSNorm width %d x %d rows", c.d, n*c.rowsPer), gout, cout, n, 1e-5)
			// in place
			p.g.RMSNorm(gx, gx, gw, 1e-6, n*c.rowsPer)
			p.c.RMSNorm(cx, cx, cw, 1e-6, n*c.rowsPer)
			p.compare(t, "RMSNorm in place", gx, cx, n, 1e-5)
		}
	})

	// The fused forms (backend/fused.go): bit-identical to the ops they
	// replace on the GPU, so against the CPU they keep those ops' bounds.
	t.Run("MatMulGroup", func(t *testing.T) {
		const k = 2048
		sizes := []int{8192, 4096, 32, 32} // Qwen3.5's Gated DeltaNet in projections
		var gw, cw, gout, cout, gref []backend.Tensor
		for i, o := range sizes {
			dt := tensor.BF16
			if i == 3 {
				dt = tensor.F32 // in the last group below: that group falls back to MatMuls
			}
			g, c := p.weight(t, "w", dt, p.randF32(o*k, 0.02), o, k)
			gw, cw = append(gw, g), append(cw, c)
			g, c = p.act(t, nil, maxT, o)
			gout, cout = append(gout, g), append(cout, c)
			g, _ = p.act(t, nil, maxT, o)
			gref = append(gref, g)
		}
		gx, cx := p.act(t, p.randF32(maxT*k, 1), maxT, k)
		for _, c := range []struct{ m, rows int }{{3, 1}, {3, 5}, {3, 8}, {2, 1}, {3, 9}, {4, 1}} {
			name := fmt.Sprintf("MatMulGroup of %d x %d rows", c.m, c.rows)
			p.g.MatMulGroup(gx, c.rows, gout[:c.m], gw[:c.m])
			backend.MatMulGroup(p.c, cx, c.rows, cout[:c.m], cw[:c.m])
			for i := 0; i < c.m; i++ {
				// the group's blocks are m_gemv_bf16's (a lone MatMul of few
				// blocks takes m_gemv_bf16_wide, another K order), so the
				// reference is m_gemv_bf16 itself. A group with an f32 weight
				// or over 8 rows is plain MatMuls.
				if c.m < 4 && c.rows <= gemvMaxRows {
					o := sizes[i]
					p.g.check("MatMul", p.g.d.launch(p.g.s, "m_gemv_bf16", grid1(blocks(o, 16)), grid1(256), 0,
						asTensor(gref[i]).buf, asTensor(gx).buf, asTensor(gw[i]).buf, c.rows, o, k))
				} else {
					p.g.MatMul(gref[i], gx, gw[i], c.rows)
				}
				p.compare(t, fmt.Sprintf("%s: product %d", name, i), gout[i], cout[i], c.rows, 1e-4)
				sameBits(t, p, fmt.Sprintf("%s: product %d vs its own MatMul", name, i), gout[i], gref[i], c.rows)
			}
		}
	})

	t.Run("AddRMSNorm", func(t *testing.T) {
		const d = 2048
		gw, cw := p.weight(t, "norm", tensor.BF16, p.randF32(d, 1), d)
		xv, tv := p.randF32(maxT*d, 3), p.randF32(maxT*d, 1)
		gx, cx := p.act(t, xv, maxT, d)
		gx2, _ := p.act(t, xv, maxT, d)
		gt, ct := p.act(t, tv, maxT, d)
		gh, ch := p.act(t, nil, maxT, d)
		gh2, _ := p.act(t, nil, maxT, d)
		p.g.AddRMSNorm(gh, gx, gt, gw, 1e-6, n)
		backend.AddRMSNorm(p.c, ch, cx, ct, cw, 1e-6, n)
		p.compare(t, "AddRMSNorm sum", gx, cx, n, 1e-6)
		p.compare(t, "AddRMSNorm norm", gh, ch, n, 1e-5)
		p.g.Add(gx2, gx2, gt, n)
		p.g.RMSNorm(gh2, gx2, gw, 1e-6, n)
		sameBits(t, p, "AddRMSNorm sum vs Add", gx, gx2, n)
		sameBits(t, p, "AddRMSNorm norm vs Add+RMSNorm", gh, gh2, n)
	})

	t.Run("Pick", func(t *testing.T) {
		const V, rows = 151936, 6
		v := p.randF32(rows*V, 3)
		v[1*V+77], v[1*V+9000] = 50, 50 // a tie: the first wins
		v[2*V+5] = float32(math.NaN())  // NaNs are skipped
		v[2*V+6] = 40
		for i := 0; i < V; i++ { // a row with nothing above -Inf
			v[3*V+i] = float32(math.Inf(-1))
		}
		v[4*V+V-1] = 60 // the maximum at the last index
		gl, _ := p.act(t, v, rows, V)
		gp, _ := p.act(t, nil, rows, 2)
		p.g.Pick(gp, gl, rows) // stepMixed has no Draws: greedy
		got := make([]float32, 2*rows)
		if err := p.g.Read(got, gp, rows); err != nil {
			t.Fatal(err)
		}
		for r := 0; r < rows; r++ {
			row := v[r*V : (r+1)*V]
			id32, m := greedyArgmax(row)
			id := int(id32)
			lp := 0.0
			if id >= 0 {
				var s float64
				for _, x := range row {
					if x == x {
						s += math.Exp(float64(x - m))
					}
				}
				lp = -math.Log(s)
			}
			if int(got[2*r]) != id || math.Abs(float64(got[2*r+1])-lp) > 1e-5*max(1, math.Abs(lp)) {
				t.Errorf("row %d: pick (%v, %v), want (%d, %v)", r, got[2*r], got[2*r+1], id, lp)
			}
		}
		// sampled picks: each output row's draw as SetStep put it; the
		// step's three rows draw from rows 0, 1 and 4 of v
		step := *testStep([3]int{0, 0, 1}, [3]int{1, 0, 1}, [3]int{2, 0, 1})
		step.Draws = []model.Draw{{Temperature: 0.8, TopP: 0.9, U: 0.3}, {}, {Temperature: 1, TopK: 50, U: 0.71}}
		p.setStep(t, &step)
		defer p.setStep(t, stepMixed)
		sv := append(append(slices.Clone(v[:2*V]), v[4*V:5*V]...), v[3*V:]...)
		gs, _ := p.act(t, sv, rows, V)
		p.g.Pick(gp, gs, 3)
		if err := p.g.Read(got, gp, 3); err != nil {
			t.Fatal(err)
		}
		var sm sample.Sampler
		for r, d := range step.Draws {
			row := sv[r*V : (r+1)*V]
			want, _, err := sm.Pick(row, d)
			if err != nil {
				t.Fatal(err)
			}
			if int32(got[2*r]) != want {
				t.Errorf("step row %d (%+v): picked %v, the host sampler %d", r, d, got[2*r], want)
			}
		}
	})

	t.Run("Rope", func(t *testing.T) {
		for _, r := range []struct {
			heads int
			rope  backend.Rope
		}{
			{32, backend.Rope{HeadDim: 128, RotaryDim: 128, Theta: 1e6}}, // Qwen3-30B
			{16, backend.Rope{HeadDim: 256, RotaryDim: 64, Theta: 1e7}},  // Qwen3.5 partial rotary
		} {
			w := r.heads * r.rope.HeadDim
			gx, cx := p.act(t, p.randF32(maxT*w, 1), maxT, w)
			p.g.Rope(gx, &r.rope, r.heads, n)
			p.c.Rope(cx, &r.rope, r.heads, n)
			p.compare(t, fmt.Sprintf("Rope %d heads x %d, rotary %d", r.heads, r.rope.HeadDim, r.rope.RotaryDim), gx, cx, n, 1e-5)
		}
	})

	t.Run("Attention", func(t *testing.T) {
		for _, a := range []backend.Attn{
			{Heads: 32, KVHeads: 4, HeadDim: 128}, // Qwen3-30B
			{Heads: 16, KVHeads: 2, HeadDim: 256}, // Qwen3-Next / 3.5
			{Heads: 4, KVHeads: 2, HeadDim: 16},   // tiny fixture
		} {
			a.Scale = float32(1 / math.Sqrt(float64(a.HeadDim)))
			gkv, err := p.g.AllocKV(256, 16, a.KVHeads, a.HeadDim)
			if err != nil {
				t.Fatal(err)
			}
			ckv, err := p.c.AllocKV(256, 16, a.KVHeads, a.HeadDim)
			if err != nil {
				t.Fatal(err)
			}
			qw, kw := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
			// stepLong fills slot 3 with 600 positions; the decode-only steps
			// then take the split-K path with many splits (1 row: 128).
			for _, st := range []*backend.Step{stepFill, stepMixed, stepLong, stepDecode, stepDecode1} {
				p.setStep(t, st)
				m := len(st.Tokens)
				gq, cq := p.act(t, p.randF32(m*qw, 1), m, qw)
				gk, ck := p.act(t, p.randF32(m*kw, 1), m, kw)
				gv, cv := p.act(t, p.randF32(m*kw, 1), m, kw)
				gout, cout := p.act(t, nil, m, qw)
				p.g.Attention(gout, gq, gk, gv, gkv, &a, m)
				p.c.Attention(cout, cq, ck, cv, ckv, &a, m)
				p.compare(t, fmt.Sprintf("Attention %d/%d x %d, %d rows", a.Heads, a.KVHeads, a.HeadDim, m), gout, cout, m, 1e-4)
			}
		}
	})

	p.setStep(t, stepMixed)
	t.Run("Elementwise", func(t *testing.T) {
		const w = 768
		ga, ca := p.act(t, p.randF32(maxT*w, 2), maxT, w)
		gb, cb := p.act(t, p.randF32(maxT*w, 2), maxT, w)
		gout, cout := p.act(t, nil, maxT, w)
		p.g.Add(gout, ga, gb, n)
		p.c.Add(cout, ca, cb, n)
		p.compare(t, "Add", gout, cout, n, 1e-6)
		p.g.SiLUMul(gout, ga, gb, n)
		p.c.SiLUMul(cout, ca, cb, n)
		p.compare(t, "SiLUMul", gout, cout, n, 1e-6)
		gg, cg := p.act(t, p.randF32(maxT*w, 2), maxT, w)
		p.g.SigmoidGate(gout, ga, gg, n)
		p.c.SigmoidGate(cout, ca, cg, n)
		p.compare(t, "SigmoidGate (full width)", gout, cout, n, 1e-6)
		g1, c1 := p.act(t, p.randF32(maxT, 2), maxT, 1)
		p.g.SigmoidGate(ga, ga, g1, n)
		p.c.SigmoidGate(ca, ca, c1, n)
		p.compare(t, "SigmoidGate (one column, in place)", ga, ca, n, 1e-6)
	})

	t.Run("RouterTopK", func(t *testing.T) {
		for _, c := range []struct {
			e, k int
			norm bool
			live int // the step's Live: rows from it are padding, routed nowhere
		}{{128, 8, true, 0}, {512, 10, true, 0}, {256, 8, false, 0}, {8, 2, true, 0}, {256, 8, true, n - 2}, {512, 10, true, n - 1}} {
			padded := *stepMixed
			padded.Live = c.live
			p.setStep(t, &padded)
			gl, cl := p.act(t, p.randF32(maxT*c.e, 1), maxT, c.e)
			gw, cw := p.act(t, nil, maxT, c.k)
			gi, ci := p.ids(t, maxT, c.k)
			p.g.RouterTopK(gw, gi, gl, c.k, c.norm, n)
			p.c.RouterTopK(cw, ci, cl, c.k, c.norm, n)
			name := fmt.Sprintf("RouterTopK E=%d k=%d norm=%v live=%d", c.e, c.k, c.norm, c.live)
			p.compare(t, name+" weights", gw, cw, n, 1e-5)
			got := make([]int32, n*c.k)
			if err := p.g.ReadI32(got, gi, n*c.k); err != nil {
				t.Fatal(err)
			}
			for i, want := range ci.(*cpu.Tensor).I32()[:n*c.k] {
				if got[i] != want {
					t.Fatalf("%s: ids[%d] = %d, want %d", name, i, got[i], want)
				}
				if c.live > 0 && (i >= c.live*c.k) != (got[i] < 0) {
					t.Fatalf("%s: ids[%d] = %d: padding rows (from %d) must route nowhere, the others somewhere", name, i, got[i], c.live)
				}
			}
		}
		p.setStep(t, stepMixed)
	})

	t.Run("MoE", func(t *testing.T) {
		const E, H, I, k = 32, 2048, 768, 8 // Qwen3-30B expert shapes, fewer experts
		for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
			ex := [2]backend.Experts{{Hidden: H, Inter: I}, {Hidden: H, Inter: I}}
			for e := 0; e < E; e++ {
				for j, dst := range []*[]backend.Tensor{&ex[0].Gate, &ex[0].Up, &ex[0].Down} {
					shape := []int{I, H}
					if j == 2 {
						shape = []int{H, I}
					}
					g, c := p.weight(t, fmt.Sprintf("expert %d.%d", e, j), dt, p.randF32(H*I, 0.03), shape...)
					*dst = append(*dst, g)
					other := []*[]backend.Tensor{&ex[1].Gate, &ex[1].Up, &ex[1].Down}[j]
					*other = append(*other, c)
				}
			}
			gx, cx := p.act(t, p.randF32(maxT*H, 1), maxT, H)
			gl, cl := p.act(t, p.randF32(maxT*E, 1), maxT, E)
			gw, cw := p.act(t, nil, maxT, k)
			gi, ci := p.ids(t, maxT, k)
			p.g.RouterTopK(gw, gi, gl, k, true, n)
			p.c.RouterTopK(cw, ci, cl, k, true, n)
			// experts served elsewhere (-1) are skipped
			ci.(*cpu.Tensor).I32()[3] = -1
			got := make([]int32, n*k)
			if err := p.g.ReadI32(got, gi, n*k); err != nil {
				t.Fatal(err)
			}
			got[3] = -1
			if err := p.g.write(gi, got); err != nil {
				t.Fatal(err)
			}
			gout, cout := p.act(t, nil, maxT, H)
			p.g.MoE(gout, gx, &ex[0], gw, gi, n)
			p.c.MoE(cout, cx, &ex[1], cw, ci, n)
			p.compare(t, fmt.Sprintf("MoE %s E=%d H=%d I=%d k=%d, %d tokens", dt, E, H, I, k, n), gout, cout, n, 1e-5)
			// a decode-sized step reuses the layer's expert table
			p.g.MoE(gout, gx, &ex[0], gw, gi, 1)
			p.c.MoE(cout, cx, &ex[1], cw, ci, 1)
			p.compare(t, "MoE one token", gout, cout, 1, 1e-5)
		}
	})

	t.Run("GatherRows", func(t *testing.T) {
		const w = 2048
		gx, cx := p.act(t, p.randF32(maxT*w, 1), maxT, w)
		gout, cout := p.act(t, nil, 8, w)
		m := len(stepMixed.OutRows)
		p.g.GatherRows(gout, gx, 1, m-1)
		p.c.GatherRows(cout, cx, 1, m-1)
		p.compare(t, "GatherRows", gout, cout, m-1, 0)
	})

	t.Run("LinearAttention", func(t *testing.T) {
		for _, sh := range []backend.LinearShape{
			{Layers: 2, ConvKernel: 4, Delta: backend.DeltaShape{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128}}, // Qwen3-Next-80B
			{Layers: 2, ConvKernel: 4, Delta: backend.DeltaShape{KHeads: 4, VHeads: 4, KDim: 32, VDim: 16}},     // tiny fixture
		} {
			d := sh.Delta
			gst, err := p.g.AllocLinearState(sh, 4)
			if err != nil {
				t.Fatal(err)
			}
			cst, err := p.c.AllocLinearState(sh, 4)
			if err != nil {
				t.Fatal(err)
			}
			ch, vw := d.ConvChannels(), d.VHeads*d.VDim
			gcw, ccw := p.weight(t, "conv1d", tensor.F32, p.randF32(ch*sh.ConvKernel, 0.5), ch, 1, sh.ConvKernel)
			gal, cal := p.weight(t, "A_log", tensor.BF16, p.randF32(d.VHeads, 1), d.VHeads)
			gdb, cdb := p.weight(t, "dt_bias", tensor.BF16, p.randF32(d.VHeads, 1), d.VHeads)
			gnw, cnw := p.weight(t, "norm", tensor.F32, p.randF32(d.VDim, 1), d.VDim)
			label := fmt.Sprintf("Hk=%d Hv=%d Dk=%d Dv=%d", d.KHeads, d.VHeads, d.KDim, d.VDim)
			for si, st := range []*backend.Step{stepFill, stepMixed} {
				p.setStep(t, st)
				m := len(st.Tokens)
				for layer := 0; layer < sh.Layers; layer++ {
					where := fmt.Sprintf("%s step %d layer %d", label, si, layer)
					gx, cx := p.act(t, p.randF32(m*ch, 1), m, ch)
					gc, cc := p.act(t, nil, m, ch)
					p.g.CausalConv1D(gc, gx, gcw, gst, layer, m)
					p.c.CausalConv1D(cc, cx, ccw, cst, layer, m)
					p.compare(t, "CausalConv1D "+where, gc, cc, m, 1e-5)
					ga, ca := p.act(t, p.randF32(m*d.VHeads, 1), m, d.VHeads)
					gb, cb := p.act(t, p.randF32(m*d.VHeads, 1), m, d.VHeads)
					gg, cg := p.act(t, nil, m, d.VHeads)
					gbeta, cbeta := p.act(t, nil, m, d.VHeads)
					p.g.DeltaGates(gg, gbeta, ga, gb, gal, gdb, m)
					p.c.DeltaGates(cg, cbeta, ca, cb, cal, cdb, m)
					p.compare(t, "DeltaGates g "+where, gg, cg, m, 1e-5)
					p.compare(t, "DeltaGates beta "+where, gbeta, cbeta, m, 1e-5)
					gout, cout := p.act(t, nil, m, vw)
					// both read the CPU's conv output and gates, so the rule is
					// compared alone
					for _, w := range [][2]backend.Tensor{{gc, cc}, {gg, cg}, {gbeta, cbeta}} {
						n := m * w[1].Shape()[1]
						if err := p.g.write(w[0], w[1].(*cpu.Tensor).F32()[:n]); err != nil {
							t.Fatal(err)
						}
					}
					p.g.GatedDeltaRule(gout, gc, gg, gbeta, gst, layer, m)
					p.c.GatedDeltaRule(cout, cc, cg, cbeta, cst, layer, m)
					p.compare(t, "GatedDeltaRule "+where, gout, cout, m, 1e-4)
					gz, cz := p.act(t, p.randF32(m*vw, 1), m, vw)
					p.g.GatedRMSNorm(gout, gout, gz, gnw, 1e-6, m*d.VHeads)
					p.c.GatedRMSNorm(cout, cout, cz, cnw, 1e-6, m*d.VHeads)
					p.compare(t, "GatedRMSNorm "+where, gout, cout, m, 1e-4)
				}
			}
			// a freed slot starts from zero state
			gst.Free(1)
			cst.Free(1)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		p.setStep(t, stepMixed)
		gw, _ := p.weight(t, "w", tensor.BF16, p.randF32(64*32, 1), 64, 32)
		gx, _ := p.act(t, nil, maxT, 48)
		gout, _ := p.act(t, nil, maxT, 64)
		p.g.MatMul(gout, gx, gw, n)
		p.g.Add(gout, gout, gout, n) // skipped after the error
		err := p.g.Sync()
		if err == nil || !strings.Contains(err.Error(), "MatMul") {
			t.Fatalf("mismatched MatMul: Sync returned %v", err)
		}
		t.Logf("error reported: %v", err)
		if err := p.g.Sync(); err != nil {
			t.Fatalf("second Sync: %v", err)
		}
		bad := testStep([3]int{0, 0, 3})
		bad.Tokens[1] = 5000
		p.setStep(t, bad)
		ge, _ := p.weight(t, "embed", tensor.BF16, p.randF32(1000*32, 1), 1000, 32)
		p.g.Embed(gx, ge)
		if err := p.g.Sync(); err == nil || !strings.Contains(err.Error(), "5000") {
			t.Fatalf("token outside the vocabulary: Sync returned %v", err)
		}
	})
}

// decodeLayer is a Qwen3-MoE-shaped layer (norm, q/k/v projections,
// per-head norms, rotary, paged attention, o projection, residual, router,
// routed experts, residual) on the GPU backend, for B decode sequences
// whose caches were filled by a prefill.
type decodeLayer struct {
	g                            *Backend
	B                            int
	x, h, q, k, v, att, tmp      backend.Tensor
	rl, rw, ri                   backend.Tensor
	norm, qn, wq, wk, wv, wo, wr backend.Tensor
	ex                           backend.Experts
	kv                           *backend.KVCache
	rope                         backend.Rope
	attn                         backend.Attn
	heads, kvh, topK, hidden     int
}

type layerShape struct{ H, heads, kvh, hd, E, k, I, B int }

func newDecodeLayer(t testing.TB, p *opPair, c layerShape) *decodeLayer {
	g := p.g
	// one random block of weights, uploaded once per tensor
	blk := p.randF32(max(c.heads*c.hd, c.H, c.I)*max(c.H, c.heads*c.hd), 0.03)
	w := func(o, i int) backend.Tensor {
		x, _ := p.weight(t, "w", tensor.BF16, blk[:o*i], o, i)
		return x
	}
	L := &decodeLayer{g: g, B: c.B, heads: c.heads, kvh: c.kvh, topK: c.k, hidden: c.H}
	L.norm, L.qn = w(1, c.H), w(1, c.hd)
	L.wq, L.wk, L.wv, L.wo, L.wr = w(c.heads*c.hd, c.H), w(c.kvh*c.hd, c.H), w(c.kvh*c.hd, c.H), w(c.H, c.heads*c.hd), w(c.E, c.H)
	L.ex = backend.Experts{Hidden: c.H, Inter: c.I}
	for e := 0; e < c.E; e++ {
		L.ex.Gate, L.ex.Up, L.ex.Down = append(L.ex.Gate, w(c.I, c.H)), append(L.ex.Up, w(c.I, c.H)), append(L.ex.Down, w(c.H, c.I))
	}
	rows := 0
	for s := 0; s < c.B; s++ {
		rows += 20 + 13*s
	}
	alloc := func(dt tensor.DType, cols int) backend.Tensor {
		x, err := g.Alloc(dt, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	L.x, L.h, L.tmp = alloc(tensor.F32, c.H), alloc(tensor.F32, c.H), alloc(tensor.F32, c.H)
	L.q, L.att = alloc(tensor.F32, c.heads*c.hd), alloc(tensor.F32, c.heads*c.hd)
	L.k, L.v = alloc(tensor.F32, c.kvh*c.hd), alloc(tensor.F32, c.kvh*c.hd)
	L.rl, L.rw, L.ri = alloc(tensor.F32, c.E), alloc(tensor.F32, c.k), alloc(tensor.I32, c.k)
	var err error
	if L.kv, err = g.AllocKV(64*c.B, 16, c.kvh, c.hd); err != nil {
		t.Fatal(err)
	}
	L.rope = backend.Rope{HeadDim: c.hd, RotaryDim: c.hd, Theta: 1e6}
	L.attn = backend.Attn{Heads: c.heads, KVHeads: c.kvh, HeadDim: c.hd, Scale: float32(1 / math.Sqrt(float64(c.hd)))}
	// fill the caches: sequence s holds 20+13s tokens
	var spans [][3]int
	for s := 0; s < c.B; s++ {
		spans = append(spans, [3]int{s, 0, 20 + 13*s})
	}
	fill := testStep(spans...)
	if err := g.SetStep(fill); err != nil {
		t.Fatal(err)
	}
	if err := g.write(L.x, p.randF32(rows*c.H, 1)); err != nil {
		t.Fatal(err)
	}
	n := len(fill.Tokens)
	g.RMSNorm(L.h, L.x, L.norm, 1e-6, n)
	g.MatMul(L.k, L.h, L.wk, n)
	g.MatMul(L.v, L.h, L.wv, n)
	a := backend.Attn{Heads: c.kvh, KVHeads: c.kvh, HeadDim: c.hd, Scale: 0.1}
	g.Attention(L.att, L.k, L.k, L.v, L.kv, &a, n)
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	return L
}

// step is the decode step of every sequence at offset i past its prompt.
func (L *decodeLayer) step(i int) *backend.Step {
	var spans [][3]int
	for s := 0; s < L.B; s++ {
		spans = append(spans, [3]int{s, 20 + 13*s + i, 1})
	}
	return testStep(spans...)
}

func (L *decodeLayer) run() {
	g, B := L.g, L.B
	g.RMSNorm(L.h, L.x, L.norm, 1e-6, B)
	g.MatMul(L.q, L.h, L.wq, B)
	g.MatMul(L.k, L.h, L.wk, B)
	g.MatMul(L.v, L.h, L.wv, B)
	g.RMSNorm(L.q, L.q, L.qn, 1e-6, B*L.heads)
	g.RMSNorm(L.k, L.k, L.qn, 1e-6, B*L.kvh)
	g.Rope(L.q, &L.rope, L.heads, B)
	g.Rope(L.k, &L.rope, L.kvh, B)
	g.Attention(L.att, L.q, L.k, L.v, L.kv, &L.attn, B)
	g.MatMul(L.tmp, L.att, L.wo, B)
	g.Add(L.x, L.x, L.tmp, B)
	g.RMSNorm(L.h, L.x, L.norm, 1e-6, B)
	g.MatMul(L.rl, L.h, L.wr, B)
	g.RouterTopK(L.rw, L.ri, L.rl, L.topK, true, B)
	g.MoE(L.tmp, L.h, &L.ex, L.rw, L.ri, B)
	g.Add(L.x, L.x, L.tmp, B)
}

// TestBackendGraphDecode captures a decode step of the layer as a CUDA
// graph and replays it for later decode steps after SetStep: each replay
// must equal the same ops run eagerly, bit for bit.
func TestBackendGraphDecode(t *testing.T) {
	p := newOpPair(t)
	L := newDecodeLayer(t, p, layerShape{H: 1024, heads: 16, kvh: 4, hd: 64, E: 16, k: 4, I: 256, B: 3})
	g := L.g
	// warm up (allocations, plans) and capture the step at offset 0
	if err := g.SetStep(L.step(0)); err != nil {
		t.Fatal(err)
	}
	L.run()
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	graph, err := g.Capture(L.run)
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Destroy()
	for i := 1; i <= 4; i++ {
		in := p.randF32(L.B*L.hidden, 1)
		// eager first, then the replay at the same positions from the same
		// input (it rewrites this step's KV rows with the same values)
		if err := g.SetStep(L.step(i)); err != nil {
			t.Fatal(err)
		}
		if err := g.write(L.x, in); err != nil {
			t.Fatal(err)
		}
		L.run()
		eager := make([]float32, L.B*L.hidden)
		if err := g.Read(eager, L.x, L.B); err != nil {
			t.Fatal(err)
		}
		if err := g.write(L.x, in); err != nil {
			t.Fatal(err)
		}
		g.Replay(graph)
		replay := make([]float32, L.B*L.hidden)
		if err := g.Read(replay, L.x, L.B); err != nil {
			t.Fatal(err)
		}
		for j := range eager {
			if eager[j] != replay[j] {
				t.Fatalf("decode step %d: replay x[%d] = %v, eager %v", i, j, replay[j], eager[j])
			}
		}
	}
	t.Logf("RESULT graph decode step (16 ops, %d sequences): 4 replays after SetStep equal eager runs bit for bit", L.B)
}

// BenchmarkBackendDecodeLayer times one Qwen3-30B-A3B-shaped layer's decode
// step (hidden 2048, 32/4 heads x 128, 128 experts top-8, inter 768) for 1
// and 8 sequences, eagerly and as a replayed CUDA graph. ns/op is one step
// including the wait for it.
func BenchmarkBackendDecodeLayer(b *testing.B) {
	for _, B := range []int{1, 8} {
		p := newOpPair(b)
		L := newDecodeLayer(b, p, layerShape{H: 2048, heads: 32, kvh: 4, hd: 128, E: 128, k: 8, I: 768, B: B})
		g := L.g
		if err := g.SetStep(L.step(0)); err != nil {
			b.Fatal(err)
		}
		L.run()
		// before: the general-shape kernels only, as a replayed graph
		g.generalOnly = true
		L.run()
		before, err := g.Capture(L.run)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("B=%d/graph-general-kernels", B), func(b *testing.B) {
			for b.Loop() {
				g.Replay(before)
				if err := g.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
		before.Destroy()
		g.generalOnly = false
		L.run()
		graph, err := g.Capture(L.run)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("B=%d/eager", B), func(b *testing.B) {
			for b.Loop() {
				L.run()
				if err := g.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("B=%d/graph", B), func(b *testing.B) {
			for b.Loop() {
				g.Replay(graph)
				if err := g.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
		graph.Destroy()
		// The bound beside it: the bf16 weight bytes a step must read (q/k/v/o
		// projections, router, and the routed experts: k per token, at most E),
		// moved by a device-to-device copy of half as many bytes (a copy reads
		// and writes, so it moves the same number of bytes through HBM).
		const H, heads, kvh, hd, E, k, I = 2048, 32, 4, 128, 128, 8, 768
		wbytes := int64(2) * (2*heads*hd*H + 2*kvh*hd*H + E*H + int64(min(B*k, E))*3*H*I)
		half := wbytes / 2
		src, err := g.alloc(half, "copy bound src")
		if err != nil {
			b.Fatal(err)
		}
		dst, err := g.alloc(half, "copy bound dst")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("B=%d/copy-bound-%dMB", B, wbytes>>20), func(b *testing.B) {
			for b.Loop() {
				g.check("copy", g.s.CopyDtoD(dst, src, half))
				if err := g.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(wbytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
		g.free(src)
		g.free(dst)
	}
}

// BenchmarkBackendDecodeLayerOps splits BenchmarkBackendDecodeLayer's step
// (one sequence) into its ops: each op is captured 50 times in one CUDA
// graph and replayed, so ns/op/50 is the op's GPU time without launch
// gaps. It shows where the layer's time goes.
func BenchmarkBackendDecodeLayerOps(b *testing.B) {
	p := newOpPair(b)
	L := newDecodeLayer(b, p, layerShape{H: 2048, heads: 32, kvh: 4, hd: 128, E: 128, k: 8, I: 768, B: 1})
	g, B := L.g, L.B
	if err := g.SetStep(L.step(0)); err != nil {
		b.Fatal(err)
	}
	L.run()
	for _, op := range []struct {
		name string
		fn   func()
	}{
		{"rmsnorm", func() { g.RMSNorm(L.h, L.x, L.norm, 1e-6, B) }},
		{"matmul-q-4096x2048", func() { g.MatMul(L.q, L.h, L.wq, B) }},
		{"matmul-k-512x2048", func() { g.MatMul(L.k, L.h, L.wk, B) }},
		{"qk-norm", func() { g.RMSNorm(L.q, L.q, L.qn, 1e-6, B*L.heads) }},
		{"rope-q", func() { g.Rope(L.q, &L.rope, L.heads, B) }},
		{"attention", func() { g.Attention(L.att, L.q, L.k, L.v, L.kv, &L.attn, B) }},
		{"matmul-o-2048x4096", func() { g.MatMul(L.tmp, L.att, L.wo, B) }},
		{"add", func() { g.Add(L.x, L.x, L.tmp, B) }},
		{"matmul-router-128x2048", func() { g.MatMul(L.rl, L.h, L.wr, B) }},
		{"router-topk", func() { g.RouterTopK(L.rw, L.ri, L.rl, L.topK, true, B) }},
		{"moe-8-experts", func() { g.MoE(L.tmp, L.h, &L.ex, L.rw, L.ri, B) }},
	} {
		graph, err := g.Capture(func() {
			for range 50 {
				op.fn()
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(op.name+"-x50", func(b *testing.B) {
			for b.Loop() {
				g.Replay(graph)
				if err := g.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
		graph.Destroy()
	}
}

// greedyArgmax is the first index of row's largest value (NaNs skipped;
// -1 when none is above -Inf) and that value.
func greedyArgmax(row []float32) (int32, float32) {
	id, m := int32(-1), float32(math.Inf(-1))
	for i, x := range row {
		if x > m {
			id, m = int32(i), x
		}
	}
	return id, m
}
