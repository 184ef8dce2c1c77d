package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ktserve/kt/backend"
)

// deltaInputs is one sequence's random gated-delta-rule inputs.
type deltaInputs struct {
	sh            backend.DeltaShape
	n             int
	q, k, v, g, b []float32
}

func randDeltaInputs(rng *rand.Rand, sh backend.DeltaShape, n int) deltaInputs {
	in := deltaInputs{sh: sh, n: n}
	fill := func(m int, f func() float32) []float32 {
		x := make([]float32, m)
		for i := range x {
			x[i] = f()
		}
		return x
	}
	normal := func() float32 { return float32(rng.NormFloat64()) }
	in.q = fill(n*sh.KHeads*sh.KDim, normal)
	in.k = fill(n*sh.KHeads*sh.KDim, normal)
	in.v = fill(n*sh.VHeads*sh.VDim, normal)
	// Decays as the model makes them: -exp(A_log)·softplus(a+dt_bias), mostly
	// mild with some strong ones.
	// Even heads decay mildly so that state crosses chunk boundaries; odd
	// heads decay as -exp(A_log)·softplus(a+dt_bias) with A up to e.
	in.g = make([]float32, n*sh.VHeads)
	for i := range in.g {
		if i%sh.VHeads%2 == 0 {
			in.g[i] = float32(-0.03 * rng.Float64())
			continue
		}
		a := math.Exp(rng.Float64()*3 - 2)
		in.g[i] = float32(-a * math.Log1p(math.Exp(rng.NormFloat64())))
	}
	in.b = fill(n*sh.VHeads, func() float32 { return float32(1 / (1 + math.Exp(-rng.NormFloat64()))) })
	return in
}

// naiveDelta is the float64 recurrent gated delta rule written from the
// definition, continuing from state s64 ([VHeads, KDim, VDim]).
func naiveDelta(in deltaInputs, t0, t1 int, s64 []float64) []float64 {
	sh := in.sh
	dk, dv := sh.KDim, sh.VDim
	rep := sh.VHeads / sh.KHeads
	out := make([]float64, (t1-t0)*sh.VHeads*dv)
	norm := func(x []float32, scale float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		r := make([]float64, len(x))
		for i, v := range x {
			r[i] = float64(v) / math.Sqrt(ss+1e-6) * scale
		}
		return r
	}
	for t := t0; t < t1; t++ {
		for h := 0; h < sh.VHeads; h++ {
			kh := h / rep
			q := norm(in.q[(t*sh.KHeads+kh)*dk:(t*sh.KHeads+kh+1)*dk], 1/math.Sqrt(float64(dk)))
			k := norm(in.k[(t*sh.KHeads+kh)*dk:(t*sh.KHeads+kh+1)*dk], 1)
			col := t*sh.VHeads + h
			e := math.Exp(float64(in.g[col]))
			s := s64[h*dk*dv : (h+1)*dk*dv]
			for i := range s {
				s[i] *= e
			}
			for j := 0; j < dv; j++ {
				var mem float64
				for i := 0; i < dk; i++ {
					mem += s[i*dv+j] * k[i]
				}
				delta := (float64(in.v[col*dv+j]) - mem) * float64(in.b[col])
				for i := 0; i < dk; i++ {
					s[i*dv+j] += k[i] * delta
				}
				var o float64
				for i := 0; i < dk; i++ {
					o += s[i*dv+j] * q[i]
				}
				out[((t-t0)*sh.VHeads+h)*dv+j] = o
			}
		}
	}
	return out
}

func newDeltaState(sh backend.DeltaShape) *DeltaState {
	return &DeltaState{
		S: make([]float32, sh.StateLen()),
		K: make([]float32, backend.DeltaChunkSize*sh.KHeads*sh.KDim),
		V: make([]float32, backend.DeltaChunkSize*sh.VHeads*sh.VDim),
		G: make([]float32, backend.DeltaChunkSize*sh.VHeads),
	}
}

// runChunked feeds the inputs to GatedDeltaRule in pieces of the given sizes.
func runChunked(t *testing.T, in deltaInputs, st *DeltaState, pieces []int) []float32 {
	return runChunkedISA(t, deltaISA(), in, st, pieces)
}

func runChunkedISA(t *testing.T, isa int, in deltaInputs, st *DeltaState, pieces []int) []float32 {
	t.Helper()
	sh := in.sh
	out := make([]float32, in.n*sh.VHeads*sh.VDim)
	pos := 0
	for _, p := range pieces {
		kq := sh.KHeads * sh.KDim
		vw := sh.VHeads * sh.VDim
		err := gatedDeltaRule(isa, deltaParallel, in.q[pos*kq:], in.k[pos*kq:], in.v[pos*vw:], kq, vw, in.g[pos*sh.VHeads:], in.b[pos*sh.VHeads:],
			p, sh, st, out[pos*vw:])
		if err != nil {
			t.Fatal(err)
		}
		pos += p
	}
	if pos != in.n {
		t.Fatalf("pieces cover %d of %d tokens", pos, in.n)
	}
	return out
}

func maxErr[T float32 | float64](got []float32, want []T) (float64, int) {
	var worst float64
	at := -1
	for i := range got {
		d := math.Abs(float64(got[i])-float64(want[i])) / (1 + math.Abs(float64(want[i])))
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	return worst, at
}

func TestGatedDeltaRuleForms(t *testing.T) {
	shapes := []backend.DeltaShape{
		{KHeads: 1, VHeads: 1, KDim: 8, VDim: 8},
		{KHeads: 2, VHeads: 4, KDim: 16, VDim: 8},
		{KHeads: 2, VHeads: 2, KDim: 32, VDim: 16},
		{KHeads: 1, VHeads: 3, KDim: 12, VDim: 20},
	}
	lengths := []int{1, 2, 5, 63, 64, 65, 127, 128, 129, 150, 200}
	for si, sh := range shapes {
		for _, n := range lengths {
			for _, isa := range deltaISAs() {
				t.Run(fmt.Sprintf("isa%d/shape%d/n%d", isa, si, n), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(si), uint64(n)))
					in := randDeltaInputs(rng, sh, n)

					want := naiveDelta(in, 0, n, make([]float64, sh.StateLen()))
					whole := runChunkedISA(t, isa, in, newDeltaState(sh), []int{n})
					if e, at := maxErr(whole, want); e > 1e-5 {
						t.Fatalf("chunked vs float64 reference: error %g at %d (%g vs %g)", e, at, whole[at], want[at])
					}

					rec := make([]float32, len(whole))
					if err := GatedDeltaRecurrent(in.q, in.k, in.v, in.g, in.b, n, sh, make([]float32, sh.StateLen()), rec); err != nil {
						t.Fatal(err)
					}
					if e, at := maxErr(rec, want); e > 1e-5 {
						t.Fatalf("recurrent vs float64 reference: error %g at %d", e, at)
					}

					// Any split of the sequence into calls gives bit-identical outputs.
					for _, pieces := range splits(rng, n) {
						got := runChunkedISA(t, isa, in, newDeltaState(sh), pieces)
						for i := range got {
							if got[i] != whole[i] {
								t.Fatalf("split %v: output %d = %g, one call gave %g", pieces, i, got[i], whole[i])
							}
						}
					}
				})
			}
		}
	}
}

// splits returns a few ways to cut n tokens into calls: token by token,
// odd sizes, and random.
func splits(rng *rand.Rand, n int) [][]int {
	cut := func(size func() int) []int {
		var p []int
		for left := n; left > 0; {
			s := min(size(), left)
			p = append(p, s)
			left -= s
		}
		return p
	}
	return [][]int{
		cut(func() int { return 1 }),
		cut(func() int { return 7 }),
		cut(func() int { return 63 }),
		cut(func() int { return 1 + rng.IntN(80) }),
	}
}

// TestDeltaStateMaterialize checks that the chunked state, folded into a full
// recurrent state, continues under the recurrent form like the float64
// reference does.
func TestDeltaStateMaterialize(t *testing.T) {
	sh := backend.DeltaShape{KHeads: 2, VHeads: 4, KDim: 16, VDim: 8}
	for _, prefix := range []int{1, 40, 64, 100, 128} {
		rng := rand.New(rand.NewPCG(7, uint64(prefix)))
		n := prefix + 30
		in := randDeltaInputs(rng, sh, n)
		st := newDeltaState(sh)
		runChunked(t, deltaInputs{sh: sh, n: prefix, q: in.q, k: in.k, v: in.v, g: in.g, b: in.b}, st, []int{prefix})
		s := make([]float32, sh.StateLen())
		if err := DeltaStateMaterialize(sh, st, s); err != nil {
			t.Fatal(err)
		}
		s64 := make([]float64, sh.StateLen())
		naiveDelta(in, 0, prefix, s64)
		if e, at := maxErr(s, s64); e > 1e-5 {
			t.Fatalf("prefix %d: materialized state error %g at %d", prefix, e, at)
		}
		kq, vw := sh.KHeads*sh.KDim, sh.VHeads*sh.VDim
		rest := n - prefix
		out := make([]float32, rest*vw)
		if err := GatedDeltaRecurrent(in.q[prefix*kq:], in.k[prefix*kq:], in.v[prefix*vw:], in.g[prefix*sh.VHeads:], in.b[prefix*sh.VHeads:],
			rest, sh, s, out); err != nil {
			t.Fatal(err)
		}
		want := naiveDelta(in, prefix, n, s64)
		if e, at := maxErr(out, want); e > 1e-5 {
			t.Fatalf("prefix %d: recurrent continuation error %g at %d", prefix, e, at)
		}
	}
}

func TestGatedDeltaRuleRejectsBadInput(t *testing.T) {
	sh := backend.DeltaShape{KHeads: 2, VHeads: 3, KDim: 4, VDim: 4}
	if err := sh.Validate(); err == nil {
		t.Fatal("3 value heads over 2 key heads accepted")
	}
	sh.VHeads = 4
	st := newDeltaState(sh)
	st.Rows = backend.DeltaChunkSize
	x := make([]float32, 64)
	if err := GatedDeltaRule(x, x, x, x, x, 1, sh, st, x); err == nil {
		t.Fatal("state with a full open chunk accepted")
	}
	st.Rows = 0
	if err := GatedDeltaRule(x, x, x, x, x, 10, sh, st, x); err == nil {
		t.Fatal("10 tokens accepted with buffers for 2")
	}
	st.S = st.S[:1]
	if err := GatedDeltaRule(x, x, x, x, x, 1, sh, st, x); err == nil {
		t.Fatal("short state accepted")
	}
}

func BenchmarkGatedDeltaDecode(b *testing.B) {
	// One Qwen3.5-35B-A3B Gated DeltaNet layer, one decode token.
	sh := backend.DeltaShape{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128}
	in := randDeltaInputs(rand.New(rand.NewPCG(1, 2)), sh, 1)
	st := newDeltaState(sh)
	out := make([]float32, sh.VHeads*sh.VDim)
	b.ResetTimer()
	for b.Loop() {
		if err := GatedDeltaRule(in.q, in.k, in.v, in.g, in.b, 1, sh, st, out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGatedDeltaPrefill256(b *testing.B) {
	sh := backend.DeltaShape{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128}
	n := 256
	in := randDeltaInputs(rand.New(rand.NewPCG(1, 2)), sh, n)
	out := make([]float32, n*sh.VHeads*sh.VDim)
	b.ResetTimer()
	for b.Loop() {
		st := newDeltaState(sh)
		if err := GatedDeltaRule(in.q, in.k, in.v, in.g, in.b, n, sh, st, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/token")
}
