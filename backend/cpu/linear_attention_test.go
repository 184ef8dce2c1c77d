package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// TestLinearAttentionSteps runs two sequences through the backend's conv and
// delta-rule ops in mixed steps (different positions, a fresh sequence
// reusing a slot) and checks every row against the ops run on each
// sequence alone.
func TestLinearAttentionSteps(t *testing.T) {
	sh := backend.DeltaShape{KHeads: 2, VHeads: 4, KDim: 8, VDim: 8}
	const kern = 4
	ch := sh.ConvChannels()
	vd := sh.VHeads * sh.VDim
	rng := rand.New(rand.NewPCG(5, 6))
	// per sequence inputs: conv input rows, g, beta
	type seqIn struct{ x, g, b []float32 }
	mk := func(n int) seqIn {
		in := seqIn{x: randF32(rng, n*ch), g: make([]float32, n*sh.VHeads), b: make([]float32, n*sh.VHeads)}
		for i := range in.g {
			in.g[i] = float32(-0.1 * rng.Float64())
			in.b[i] = float32(rng.Float64())
		}
		return in
	}
	A, B := mk(70), mk(9)
	w := randF32(rng, ch*kern)
	// alone: conv then delta rule over the whole sequence
	alone := func(isa int, in seqIn, n int) []float32 {
		conv := make([]float32, n*ch)
		if err := CausalConv1D(in.x, n, ch, w, kern, make([]float32, (kern-1)*ch), conv); err != nil {
			t.Fatal(err)
		}
		st := newDeltaState(sh)
		out := make([]float32, n*vd)
		kd := sh.KHeads * sh.KDim
		if err := gatedDeltaRule(isa, deltaParallel, conv, conv[kd:], conv[2*kd:], ch, ch, in.g, in.b, n, sh, st, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, simd := range []bool{true, false} {
		be := New(Options{Threads: 2, NoSIMD: !simd})
		isa := deltaISA()
		if !be.SIMD() {
			isa = 0
		}
		wantA, wantB := alone(isa, A, 70), alone(isa, B, 9)
		st, err := be.AllocLinearState(backend.LinearShape{Layers: 2, ConvKernel: kern, Delta: sh}, 3)
		if err != nil {
			t.Fatal(err)
		}
		T := 80
		x := mustAlloc(t, be, tensor.F32, T, ch)
		conv := mustAlloc(t, be, tensor.F32, T, ch)
		g := mustAlloc(t, be, tensor.F32, T, sh.VHeads)
		beta := mustAlloc(t, be, tensor.F32, T, sh.VHeads)
		out := mustAlloc(t, be, tensor.F32, T, vd)
		wt := f32Tensor(t, be, w, ch, kern)
		gotA := make([]float32, 70*vd)
		gotB := make([]float32, 9*vd)
		// step runs spans (slot, seq, from, to) together on layer 1.
		type span struct {
			slot     int
			in       seqIn
			dst      []float32
			from, to int
		}
		step := func(spans ...span) {
			var s backend.Step
			for _, sp := range spans {
				start := len(s.Tokens)
				for p := sp.from; p < sp.to; p++ {
					s.Tokens = append(s.Tokens, 0)
					s.Pos = append(s.Pos, int32(p))
				}
				s.Seqs = append(s.Seqs, backend.Seq{Slot: sp.slot, Start: start, Len: sp.to - sp.from, Pos: sp.from})
				copy(x.f32[start*ch:], sp.in.x[sp.from*ch:sp.to*ch])
				copy(g.f32[start*sh.VHeads:], sp.in.g[sp.from*sh.VHeads:sp.to*sh.VHeads])
				copy(beta.f32[start*sh.VHeads:], sp.in.b[sp.from*sh.VHeads:sp.to*sh.VHeads])
			}
			n := len(s.Tokens)
			if err := be.SetStep(&s); err != nil {
				t.Fatal(err)
			}
			be.CausalConv1D(conv, x, wt, st, 1, n)
			be.GatedDeltaRule(out, conv, g, beta, st, 1, n)
			if err := be.Sync(); err != nil {
				t.Fatal(err)
			}
			for i, sp := range spans {
				q := s.Seqs[i]
				copy(sp.dst[sp.from*vd:sp.to*vd], out.f32[q.Start*vd:(q.Start+q.Len)*vd])
			}
		}
		// slot 2 first holds an unrelated sequence, then B restarts there at 0.
		step(span{2, A, make([]float32, 70*vd), 0, 30})
		step(span{0, A, gotA, 0, 40}, span{2, B, gotB, 0, 4})
		step(span{2, B, gotB, 4, 5}, span{0, A, gotA, 40, 63})
		step(span{0, A, gotA, 63, 64}, span{2, B, gotB, 5, 9})
		step(span{0, A, gotA, 64, 70})
		for i := range wantA {
			if gotA[i] != wantA[i] {
				t.Fatalf("simd=%v: sequence A value %d = %g, alone %g", simd, i, gotA[i], wantA[i])
			}
		}
		for i := range wantB {
			if gotB[i] != wantB[i] {
				t.Fatalf("simd=%v: sequence B value %d = %g, alone %g", simd, i, gotB[i], wantB[i])
			}
		}
		if st.BytesPerSeq() <= 0 {
			t.Fatal("no state size")
		}
		st.Free(0)
		st.Free(2)

		// Misuse is an error from Sync, not a panic.
		s := backend.Step{Tokens: []int32{0}, Pos: []int32{0}, Seqs: []backend.Seq{{Slot: 3, Start: 0, Len: 1}}}
		if err := be.SetStep(&s); err != nil {
			t.Fatal(err)
		}
		be.CausalConv1D(conv, x, wt, st, 0, 1)
		if err := be.Sync(); err == nil {
			t.Error("slot 3 of 3 accepted")
		}
		s.Seqs[0].Slot = 0
		be.GatedDeltaRule(out, conv, g, beta, st, 2, 1)
		if err := be.Sync(); err == nil {
			t.Error("layer 2 of 2 accepted")
		}
		be.GatedDeltaRule(out, conv, g, beta, nil, 0, 1)
		if err := be.Sync(); err == nil {
			t.Error("nil state accepted")
		}
		be.Close()
	}
}

func TestDeltaGatesAndSigmoidGate(t *testing.T) {
	be := New(Options{Threads: 1})
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	n, h := 3, 4
	a, b := randF32(rng, n*h), randF32(rng, n*h)
	a[0] = 30 // softplus threshold
	aLog, dt := randF32(rng, h), randF32(rng, h)
	g := mustAlloc(t, be, tensor.F32, n, h)
	beta := mustAlloc(t, be, tensor.F32, n, h)
	be.DeltaGates(g, beta, f32Tensor(t, be, a, n, h), f32Tensor(t, be, b, n, h), f32Tensor(t, be, aLog, h), f32Tensor(t, be, dt, h), n)
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		for j := 0; j < h; j++ {
			x := float64(a[i*h+j] + dt[j])
			sp := math.Log1p(math.Exp(x))
			if x > 20 {
				sp = x
			}
			wg := -math.Exp(float64(aLog[j])) * sp
			wb := 1 / (1 + math.Exp(-float64(b[i*h+j])))
			if d := math.Abs(float64(g.f32[i*h+j]) - wg); d > 1e-5*(1+math.Abs(wg)) {
				t.Errorf("g[%d,%d] = %g, want %g", i, j, g.f32[i*h+j], wg)
			}
			if d := math.Abs(float64(beta.f32[i*h+j]) - wb); d > 1e-6 {
				t.Errorf("beta[%d,%d] = %g, want %g", i, j, beta.f32[i*h+j], wb)
			}
		}
	}
	x := randF32(rng, n*h)
	for _, gw := range []int{1, h} {
		gate := randF32(rng, n*gw)
		out := mustAlloc(t, be, tensor.F32, n, h)
		be.SigmoidGate(out, f32Tensor(t, be, x, n, h), f32Tensor(t, be, gate, n, gw), n)
		if err := be.Sync(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n*h; i++ {
			want := float64(x[i]) / (1 + math.Exp(-float64(gate[i/h*gw+i%h%gw])))
			if math.Abs(float64(out.f32[i])-want) > 1e-6 {
				t.Errorf("gate width %d: out[%d] = %g, want %g", gw, i, out.f32[i], want)
			}
		}
	}
	be.SigmoidGate(mustAlloc(t, be, tensor.F32, n, h), f32Tensor(t, be, x, n, h), mustAlloc(t, be, tensor.F32, n, 2), n)
	if err := be.Sync(); err == nil {
		t.Error("gate of width 2 for x of width 4 accepted")
	}
}
