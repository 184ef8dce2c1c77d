package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// mlaRef is multi-head latent attention as transformers computes it, in
// float64: keys and values expanded from the normed latent through
// kv_b_proj, the rope parts rotated, softmax attention over positions
// 0..pos. kvr and qr are one sequence's rows; wb kv_b_proj, nw the norm.
func mlaRef(s backend.MLAShape, r *backend.MLARope, scale, eps float64, kvr, qr [][]float32, wb, nw []float64, pos int) []float64 {
	R, W := s.Rank, s.CacheWidth()
	rope := func(x []float32, p int) []float64 {
		half := len(x) / 2
		x1, x2 := make([]float64, half), make([]float64, half)
		for i := range half {
			if r.Interleave {
				x1[i], x2[i] = float64(x[2*i]), float64(x[2*i+1])
			} else {
				x1[i], x2[i] = float64(x[i]), float64(x[i+half])
			}
		}
		out := make([]float64, len(x))
		for i := range half {
			a := float64(p) * float64(r.InvFreq[i])
			c, sn := math.Cos(a)*float64(r.AttnFactor), math.Sin(a)*float64(r.AttnFactor)
			out[i] = x1[i]*c - x2[i]*sn
			out[i+half] = x2[i]*c + x1[i]*sn
		}
		return out
	}
	lat := make([][]float64, pos+1)
	krot := make([][]float64, pos+1)
	for p := 0; p <= pos; p++ {
		var ss float64
		for _, v := range kvr[p][:R] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(R)+eps)
		lat[p] = make([]float64, R)
		for i, v := range kvr[p][:R] {
			lat[p][i] = nw[i] * float64(v) * inv
		}
		krot[p] = rope(kvr[p][R:W], p)
	}
	out := make([]float64, s.Heads*s.VDim)
	qk := s.Nope + s.RopeDim
	for h := 0; h < s.Heads; h++ {
		q := qr[pos][h*qk : (h+1)*qk]
		qrot := rope(q[s.Nope:], pos)
		sc := make([]float64, pos+1)
		m := math.Inf(-1)
		for p := 0; p <= pos; p++ {
			var d float64
			for i := 0; i < s.Nope; i++ {
				var k float64
				for c := 0; c < R; c++ {
					k += wb[(h*(s.Nope+s.VDim)+i)*R+c] * lat[p][c]
				}
				d += float64(q[i]) * k
			}
			for i, x := range qrot {
				d += x * krot[p][i]
			}
			sc[p] = d * scale
			m = math.Max(m, sc[p])
		}
		var sum float64
		for p := range sc {
			sc[p] = math.Exp(sc[p] - m)
			sum += sc[p]
		}
		for p := 0; p <= pos; p++ {
			for dv := 0; dv < s.VDim; dv++ {
				var v float64
				for c := 0; c < R; c++ {
					v += wb[(h*(s.Nope+s.VDim)+s.Nope+dv)*R+c] * lat[p][c]
				}
				out[h*s.VDim+dv] += sc[p] / sum * v
			}
		}
	}
	return out
}

// TestMLAttention runs two steps over two sequences in a paged latent cache
// (prefill chunks, then a decode and a chunk continuing a prompt) with
// kv_b_proj in bf16 and block-scaled FP8, the rope interleaved or not, and
// compares every row with the expanded float64 attention.
func TestMLAttention(t *testing.T) {
	s := backend.MLAShape{Heads: 3, Nope: 8, RopeDim: 6, VDim: 5, Rank: 10}
	for name, b := range backends(t) {
		for _, fp8 := range []bool{false, true} {
			for _, inter := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/fp8=%v/interleave=%v", name, fp8, inter), func(t *testing.T) {
					testMLA(t, b, s, fp8, inter)
				})
			}
		}
	}
}

func testMLA(t *testing.T, b *Backend, s backend.MLAShape, fp8, inter bool) {
	rng := rand.New(rand.NewPCG(3, 4))
	const ps, pages = 4, 16
	rows := s.Heads * (s.Nope + s.VDim)
	hw, wb := hostWeight(rng, tensor.BF16, 0.3, rows, s.Rank)
	if fp8 {
		w32 := make([]float32, len(wb))
		for i, v := range wb {
			w32[i] = float32(v)
		}
		h, deq, err := backend.QuantizeFP8("kv_b_proj", w32, rows, s.Rank, [2]int{8, 4})
		if err != nil {
			t.Fatal(err)
		}
		hw = h
		for i, v := range deq {
			wb[i] = float64(v)
		}
	}
	kvB := mustW(t, b, hw)
	hn, nw := hostWeight(rng, tensor.F32, 1, s.Rank)
	norm := mustW(t, b, hn)
	p := &backend.MLAParams{MLAShape: s, Scale: 0.2, Eps: 1e-6,
		Rope: backend.MLARope{InvFreq: []float32{1, 0.3, 0.05}, AttnFactor: 1.3, Interleave: inter}}
	cache, err := b.AllocMLA(pages, ps, s)
	if err != nil {
		t.Fatal(err)
	}
	lens := []int{9, 7}
	pg := [][]int32{{3, 7, 1}, {0, 12}}
	kvr, qr := make([][][]float32, 2), make([][][]float32, 2)
	for i, L := range lens {
		for range L {
			kvr[i] = append(kvr[i], randF32(rng, s.CacheWidth()))
			qr[i] = append(qr[i], randF32(rng, s.QWidth()))
		}
	}
	// step 1: 8 of sequence 0, 5 of sequence 1; step 2: one and two more
	for _, st := range [][2][2]int{{{0, 8}, {0, 5}}, {{8, 9}, {5, 7}}} {
		step := &backend.Step{}
		var qs, ks []float32
		for i, span := range st {
			step.Seqs = append(step.Seqs, backend.Seq{Slot: i, Start: len(step.Tokens), Len: span[1] - span[0], Pos: span[0], Pages: pg[i]})
			for p := span[0]; p < span[1]; p++ {
				step.Tokens = append(step.Tokens, 0)
				step.Pos = append(step.Pos, int32(p))
				qs = append(qs, qr[i][p]...)
				ks = append(ks, kvr[i][p]...)
			}
		}
		n := len(step.Tokens)
		if err := b.SetStep(step); err != nil {
			t.Fatal(err)
		}
		q, kv := f32Tensor(t, b, qs, n, s.QWidth()), f32Tensor(t, b, ks, n, s.CacheWidth())
		out := mustAlloc(t, b, tensor.F32, n, s.Heads*s.VDim)
		b.MLAttention(out, q, kv, norm, kvB, cache, p, n)
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
		r := 0
		for i, span := range st {
			for pos := span[0]; pos < span[1]; pos++ {
				want := mlaRef(s, &p.Rope, float64(p.Scale), float64(p.Eps), kvr[i], qr[i], wb, nw, pos)
				closeTo(t, fmt.Sprintf("seq %d pos %d", i, pos), out.f32[r*len(want):(r+1)*len(want)], want, func(int) float64 { return 1e-4 })
				r++
			}
		}
		for i, x := range qs {
			if q.f32[i] != x {
				t.Fatalf("MLAttention modified q[%d]", i)
			}
		}
	}
}

// TestRouterGroupTopK checks DeepSeek-V3's routing against a direct
// transcription on random rows: bias for the choice only, groups scored by
// their best two, ineligible experts at 0, weights renormalised or not and
// scaled, padding rows routed nowhere.
func TestRouterGroupTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const E, n = 16, 7
	b := New(Options{Threads: 1})
	defer b.Close()
	hb, bias := hostWeight(rng, tensor.BF16, 0.5, E)
	bt := mustW(t, b, hb)
	for _, g := range []backend.GroupRoute{
		{K: 4, Groups: 4, TopKGroups: 2, Norm: true, Scale: 2.5},
		{K: 6, Groups: 1, TopKGroups: 1, Norm: false, Scale: 2.827},
		{K: 3, Groups: 8, TopKGroups: 3, Norm: true, Scale: 1},
	} {
		t.Run(fmt.Sprintf("%+v", g), func(t *testing.T) {
			logits := randF32(rng, n*E)
			for i := range logits {
				logits[i] *= 3
			}
			step := &backend.Step{Tokens: make([]int32, n), Pos: make([]int32, n), Live: n - 1,
				Seqs: []backend.Seq{{Len: n, Pages: []int32{0}}}}
			if err := b.SetStep(step); err != nil {
				t.Fatal(err)
			}
			lt := f32Tensor(t, b, logits, n, E)
			wts, ids := mustAlloc(t, b, tensor.F32, n, g.K), mustAlloc(t, b, tensor.I32, n, g.K)
			b.RouterGroupTopK(wts, ids, lt, bt, &g, n)
			if err := b.Sync(); err != nil {
				t.Fatal(err)
			}
			per := E / g.Groups
			for r := 0; r < n; r++ {
				gotIDs, gotW := ids.i32[r*g.K:(r+1)*g.K], wts.f32[r*g.K:(r+1)*g.K]
				if r == n-1 {
					for j := range gotIDs {
						if gotIDs[j] != -1 || gotW[j] != 0 {
							t.Fatalf("padding row routed to %v with %v", gotIDs, gotW)
						}
					}
					continue
				}
				sc, choice := make([]float64, E), make([]float64, E)
				for e := range sc {
					sc[e] = 1 / (1 + math.Exp(-float64(logits[r*E+e])))
					choice[e] = sc[e] + bias[e]
				}
				gs := make([]float64, g.Groups)
				for gi := range gs {
					v := append([]float64(nil), choice[gi*per:(gi+1)*per]...)
					best := argmaxExcept(v, nil)
					second := argmaxExcept(v, []int{best})
					gs[gi] = v[best] + v[second]
				}
				var keep []int
				for range g.TopKGroups {
					keep = append(keep, argmaxExcept(gs, keep))
				}
				masked := make([]float64, E)
				for _, gi := range keep {
					copy(masked[gi*per:(gi+1)*per], choice[gi*per:(gi+1)*per])
				}
				var want []int
				for range g.K {
					want = append(want, argmaxExcept(masked, want))
				}
				var sum float64
				for _, e := range want {
					sum += sc[e]
				}
				for j, e := range want {
					w := sc[e]
					if g.Norm {
						w /= sum + 1e-20
					}
					w *= float64(g.Scale)
					if int(gotIDs[j]) != e || math.Abs(float64(gotW[j])-w) > 1e-6 {
						t.Fatalf("row %d pick %d: expert %d weight %g, want %d weight %g", r, j, gotIDs[j], gotW[j], e, w)
					}
				}
			}
		})
	}
}

// argmaxExcept is the index of the largest value not in skip (the first
// of equals).
func argmaxExcept(v []float64, skip []int) int {
	best := -1
	for i, x := range v {
		taken := false
		for _, s := range skip {
			taken = taken || s == i
		}
		if !taken && (best < 0 || x > v[best]) {
			best = i
		}
	}
	return best
}
