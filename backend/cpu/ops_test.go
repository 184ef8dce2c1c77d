package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// backends returns the SIMD backend (when the CPU has it) and the portable
// one, so every op test checks both.
func backends(t *testing.T) map[string]*Backend {
	m := map[string]*Backend{"go": New(Options{Threads: 2, NoSIMD: true})}
	if haveAVX512() {
		m["avx512"] = New(Options{Threads: 2})
	} else {
		t.Log("no AVX-512 here: testing the portable kernels only")
	}
	t.Cleanup(func() {
		for _, b := range m {
			b.Close()
		}
	})
	return m
}

// hostWeight makes random weights of dtype dt and returns them with their
// exact values (after rounding to dt) as float64.
func hostWeight(rng *rand.Rand, dt tensor.DType, scale float64, shape ...int) (backend.Host, []float64) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	ref := make([]float64, n)
	data := make([]byte, n*dt.Size())
	for i := range ref {
		v := float32(rng.NormFloat64() * scale)
		switch dt {
		case tensor.F32:
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			ref[i] = float64(v)
		case tensor.BF16:
			b := tensor.F32ToBF16(v)
			binary.LittleEndian.PutUint16(data[2*i:], b)
			ref[i] = float64(tensor.BF16ToF32(b))
		case tensor.F16:
			b := f32ToF16(v)
			binary.LittleEndian.PutUint16(data[2*i:], b)
			ref[i] = float64(tensor.F16ToF32(b))
		}
	}
	return backend.Host{Name: fmt.Sprintf("w%v", shape), DType: dt, Shape: shape, Data: data}, ref
}

// f32ToF16 converts by truncation; exactness does not matter, the
// reference uses the value read back.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := uint16(b>>13) & 0x3ff
	if exp <= 0 {
		return sign
	}
	if exp >= 31 {
		return sign | 0x7bff
	}
	return sign | uint16(exp)<<10 | mant
}

func randF32(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func mustW(t *testing.T, b *Backend, h backend.Host) *Tensor {
	t.Helper()
	w, err := b.Weight(h)
	if err != nil {
		t.Fatal(err)
	}
	return w.(*Tensor)
}

func mustAlloc(t *testing.T, b *Backend, dt tensor.DType, shape ...int) *Tensor {
	t.Helper()
	w, err := b.Alloc(dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return w.(*Tensor)
}

func f32Tensor(t *testing.T, b *Backend, data []float32, shape ...int) *Tensor {
	t.Helper()
	x := mustAlloc(t, b, tensor.F32, shape...)
	copy(x.f32, data)
	return x
}

func closeTo(t *testing.T, what string, got []float32, want []float64, tol func(i int) float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol(i)) {
			t.Fatalf("%s[%d] = %g, want %g (diff %g > %g)", what, i, got[i], want[i], d, tol(i))
		}
	}
}

func TestMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for name, b := range backends(t) {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
			for _, c := range []struct{ n, k, o int }{{1, 1, 1}, {1, 16, 4}, {3, 15, 7}, {5, 33, 9}, {4, 130, 70}, {70, 64, 130}, {9, 200, 3}} {
				t.Run(fmt.Sprintf("%s/%s/n%d_k%d_o%d", name, dt, c.n, c.k, c.o), func(t *testing.T) {
					h, wref := hostWeight(rng, dt, 0.1, c.o, c.k)
					w := mustW(t, b, h)
					xv := randF32(rng, c.n*c.k)
					x := f32Tensor(t, b, xv, c.n, c.k)
					out := mustAlloc(t, b, tensor.F32, c.n+2, c.o)
					b.MatMul(out, x, w, c.n)
					if err := b.Sync(); err != nil {
						t.Fatal(err)
					}
					want := make([]float64, c.n*c.o)
					mag := make([]float64, c.n*c.o)
					for i := 0; i < c.n; i++ {
						for o := 0; o < c.o; o++ {
							for k := 0; k < c.k; k++ {
								p := float64(xv[i*c.k+k]) * wref[o*c.k+k]
								want[i*c.o+o] += p
								mag[i*c.o+o] += math.Abs(p)
							}
						}
					}
					closeTo(t, "out", out.f32, want, func(i int) float64 { return 1e-6*mag[i] + 1e-7 })
					for _, v := range out.f32[c.n*c.o:] {
						if v != 0 {
							t.Fatal("MatMul wrote past n rows")
						}
					}
				})
			}
		}
	}
}

func TestRMSNormPerHead(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for name, b := range backends(t) {
		const rows, d = 6, 24
		h, wref := hostWeight(rng, tensor.BF16, 1, d)
		w := mustW(t, b, h)
		xv := randF32(rng, rows*d)
		x := f32Tensor(t, b, xv, rows/2, 2*d) // two heads per row
		b.RMSNorm(x, x, w, 1e-6, rows)        // in place
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, rows*d)
		for r := 0; r < rows; r++ {
			var ss float64
			for i := 0; i < d; i++ {
				ss += float64(xv[r*d+i]) * float64(xv[r*d+i])
			}
			inv := 1 / math.Sqrt(ss/d+1e-6)
			for i := 0; i < d; i++ {
				want[r*d+i] = float64(xv[r*d+i]) * inv * wref[i]
			}
		}
		closeTo(t, name, x.f32, want, func(i int) float64 { return 1e-5 * (1 + math.Abs(want[i])) })
	}
}

func TestRopePartial(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for name, b := range backends(t) {
		const n, heads, hd, rot = 3, 2, 16, 8
		step := &backend.Step{Tokens: make([]int32, n), Pos: []int32{0, 7, 300}}
		step.Seqs = []backend.Seq{{Start: 0, Len: 1}, {Start: 1, Len: 1, Pos: 7}, {Start: 2, Len: 1, Pos: 300}}
		if err := b.SetStep(step); err != nil {
			t.Fatal(err)
		}
		xv := randF32(rng, n*heads*hd)
		x := f32Tensor(t, b, xv, n, heads*hd)
		r := &backend.Rope{HeadDim: hd, RotaryDim: rot, Theta: 10000}
		b.Rope(x, r, heads, n)
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, len(xv))
		for i := range xv {
			want[i] = float64(xv[i])
		}
		for tk := 0; tk < n; tk++ {
			for h := 0; h < heads; h++ {
				base := (tk*heads + h) * hd
				for i := 0; i < rot/2; i++ {
					a := float64(step.Pos[tk]) * math.Pow(10000, -float64(2*i)/rot)
					x1, x2 := float64(xv[base+i]), float64(xv[base+i+rot/2])
					want[base+i] = x1*math.Cos(a) - x2*math.Sin(a)
					want[base+i+rot/2] = x2*math.Cos(a) + x1*math.Sin(a)
				}
			}
		}
		// angles at position 300 carry float32 rounding like transformers
		closeTo(t, name, x.f32, want, func(int) float64 { return 1e-4 })
	}
}

// TestAttentionPaged runs three sequences at different positions (one a
// multi-token prefill chunk, two decodes) over shuffled pages and compares
// with dense causal attention in float64.
func TestAttentionPaged(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for name, b := range backends(t) {
		t.Run(name, func(t *testing.T) {
			const heads, kvh, hd, ps, pages = 4, 2, 20, 4, 32
			kv, err := b.AllocKV(pages, ps, kvh, hd)
			if err != nil {
				t.Fatal(err)
			}
			perm := rng.Perm(pages)
			take := func(n int) []int32 {
				p := make([]int32, n)
				for i := range p {
					p[i] = int32(perm[0])
					perm = perm[1:]
				}
				return p
			}
			// history lengths and new tokens per sequence
			type seq struct{ hist, add int }
			seqs := []seq{{0, 6}, {9, 1}, {13, 3}}
			// full K/V per sequence, positions 0..hist+add
			fullK, fullV := make([][]float32, len(seqs)), make([][]float32, len(seqs))
			step := &backend.Step{}
			for i, s := range seqs {
				tot := s.hist + s.add
				fullK[i], fullV[i] = randF32(rng, tot*kvh*hd), randF32(rng, tot*kvh*hd)
				pg := take((tot + ps - 1) / ps)
				// history goes straight into the cache
				for p := 0; p < s.hist; p++ {
					dst := (int(pg[p/ps])*ps + p%ps) * kvh * hd
					copy(kv.K.(*Tensor).f32[dst:], fullK[i][p*kvh*hd:(p+1)*kvh*hd])
					copy(kv.V.(*Tensor).f32[dst:], fullV[i][p*kvh*hd:(p+1)*kvh*hd])
				}
				step.Seqs = append(step.Seqs, backend.Seq{Slot: i, Start: len(step.Tokens), Len: s.add, Pos: s.hist, Pages: pg})
				for j := 0; j < s.add; j++ {
					step.Tokens = append(step.Tokens, 0)
					step.Pos = append(step.Pos, int32(s.hist+j))
				}
			}
			if err := b.SetStep(step); err != nil {
				t.Fatal(err)
			}
			n := len(step.Tokens)
			qv := randF32(rng, n*heads*hd)
			var kNew, vNew []float32
			for i, s := range seqs {
				kNew = append(kNew, fullK[i][s.hist*kvh*hd:]...)
				vNew = append(vNew, fullV[i][s.hist*kvh*hd:]...)
			}
			q, k, v := f32Tensor(t, b, qv, n, heads*hd), f32Tensor(t, b, kNew, n, kvh*hd), f32Tensor(t, b, vNew, n, kvh*hd)
			out := mustAlloc(t, b, tensor.F32, n, heads*hd)
			scale := float32(1 / math.Sqrt(hd))
			b.Attention(out, q, k, v, kv, &backend.Attn{Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: scale}, n)
			if err := b.Sync(); err != nil {
				t.Fatal(err)
			}
			want := make([]float64, n*heads*hd)
			for si, s := range seqs {
				for j := 0; j < s.add; j++ {
					r := step.Seqs[si].Start + j
					npos := s.hist + j + 1
					for h := 0; h < heads; h++ {
						g := h / (heads / kvh)
						sc := make([]float64, npos)
						mx := math.Inf(-1)
						for p := 0; p < npos; p++ {
							for d := 0; d < hd; d++ {
								sc[p] += float64(qv[(r*heads+h)*hd+d]) * float64(fullK[si][(p*kvh+g)*hd+d])
							}
							sc[p] *= float64(scale)
							mx = math.Max(mx, sc[p])
						}
						var sum float64
						for p := range sc {
							sc[p] = math.Exp(sc[p] - mx)
							sum += sc[p]
						}
						for p := range sc {
							for d := 0; d < hd; d++ {
								want[(r*heads+h)*hd+d] += sc[p] / sum * float64(fullV[si][(p*kvh+g)*hd+d])
							}
						}
					}
				}
			}
			closeTo(t, "out", out.f32, want, func(int) float64 { return 1e-5 })
		})
	}
}

func TestRouterTopK(t *testing.T) {
	for name, b := range backends(t) {
		logits := f32Tensor(t, b, []float32{0, 3, 1, 2, 5, 5, -1, 0}, 2, 4)
		w, ids := mustAlloc(t, b, tensor.F32, 2, 2), mustAlloc(t, b, tensor.I32, 2, 2)
		for _, norm := range []bool{false, true} {
			b.RouterTopK(w, ids, logits, 2, norm, 2)
			if err := b.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(ids.i32); got != "[1 3 0 1]" {
				t.Fatalf("%s: ids %s", name, got)
			}
			e := func(v ...float64) []float64 {
				var s float64
				for _, x := range v {
					s += math.Exp(x)
				}
				return []float64{math.Exp(v[0]) / s, math.Exp(v[1]) / s}
			}
			var want []float64
			if norm {
				want = append(e(3, 2), 0.5, 0.5)
			} else {
				a, c := e(3, 0, 1, 2), e(5, 5, -1, 0)
				want = append(a[:1], e(2, 0, 1, 3)[0], c[0], c[1])
			}
			closeTo(t, name, w.f32, want, func(int) float64 { return 1e-6 })
		}
		// the second row is padding (Step.Live 1): it routes nowhere
		step := &backend.Step{Tokens: []int32{1, 2}, Pos: []int32{0, 0},
			Seqs: []backend.Seq{{Slot: 0, Start: 0, Len: 1}, {Slot: 1, Start: 1, Len: 1}}, Live: 1}
		if err := b.SetStep(step); err != nil {
			t.Fatal(err)
		}
		b.RouterTopK(w, ids, logits, 2, true, 2)
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(ids.i32, w.f32[2:]); got != "[1 3 -1 -1] [0 0]" {
			t.Fatalf("%s: with the second row padding: ids and its weights %s", name, got)
		}
	}
}

func TestMoE(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for name, b := range backends(t) {
		const ne, k, h, inter, n = 5, 2, 24, 10, 7
		e := &backend.Experts{Hidden: h, Inter: inter}
		refs := make([][3][]float64, ne)
		for i := 0; i < ne; i++ {
			gh, g := hostWeight(rng, tensor.BF16, 0.3, inter, h)
			uh, u := hostWeight(rng, tensor.BF16, 0.3, inter, h)
			dh, d := hostWeight(rng, tensor.BF16, 0.3, h, inter)
			e.Gate = append(e.Gate, mustW(t, b, gh))
			e.Up = append(e.Up, mustW(t, b, uh))
			e.Down = append(e.Down, mustW(t, b, dh))
			refs[i] = [3][]float64{g, u, d}
		}
		xv := randF32(rng, n*h)
		idv := []int32{0, 1, 1, 0, 4, -1, 2, 3, 3, 4, 0, 2, 1, 4}
		wv := randF32(rng, n*k)
		x := f32Tensor(t, b, xv, n, h)
		ids := mustAlloc(t, b, tensor.I32, n, k)
		copy(ids.i32, idv)
		w := f32Tensor(t, b, wv, n, k)
		// every expert, then expert 2 without weights (served elsewhere:
		// skipped as ids < 0)
		for _, missing := range []int32{-1, 2} {
			ex := *e
			if missing >= 0 {
				ex.Gate, ex.Up, ex.Down = slices.Clone(e.Gate), slices.Clone(e.Up), slices.Clone(e.Down)
				ex.Gate[missing], ex.Up[missing], ex.Down[missing] = nil, nil, nil
			}
			out := mustAlloc(t, b, tensor.F32, n, h)
			b.MoE(out, x, &ex, w, ids, n)
			if err := b.Sync(); err != nil {
				t.Fatal(err)
			}
			want := make([]float64, n*h)
			for tk := 0; tk < n; tk++ {
				for j := 0; j < k; j++ {
					id := idv[tk*k+j]
					if id < 0 || id == missing {
						continue
					}
					r := refs[id]
					act := make([]float64, inter)
					for i := 0; i < inter; i++ {
						var g, u float64
						for c := 0; c < h; c++ {
							g += r[0][i*h+c] * float64(xv[tk*h+c])
							u += r[1][i*h+c] * float64(xv[tk*h+c])
						}
						act[i] = g / (1 + math.Exp(-g)) * u
					}
					for c := 0; c < h; c++ {
						var y float64
						for i := 0; i < inter; i++ {
							y += r[2][c*inter+i] * act[i]
						}
						want[tk*h+c] += float64(wv[tk*k+j]) * y
					}
				}
			}
			closeTo(t, fmt.Sprintf("%s without expert %d", name, missing), out.f32, want, func(i int) float64 { return 1e-4 * (1 + math.Abs(want[i])) })
		}
	}
}

func TestEmbedGatherAddSiLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for name, b := range backends(t) {
		h, ref := hostWeight(rng, tensor.BF16, 1, 10, 4)
		table := mustW(t, b, h)
		step := &backend.Step{Tokens: []int32{3, 9, 0}, Pos: []int32{0, 1, 2}, Seqs: []backend.Seq{{Start: 0, Len: 3}}, OutRows: []int32{2, 0}}
		if err := b.SetStep(step); err != nil {
			t.Fatal(err)
		}
		e := mustAlloc(t, b, tensor.F32, 4, 4)
		b.Embed(e, table)
		g := mustAlloc(t, b, tensor.F32, 2, 4)
		b.GatherRows(g, e, 0, 2)
		s := mustAlloc(t, b, tensor.F32, 4, 4)
		b.Add(s, e, e, 3)
		a := mustAlloc(t, b, tensor.F32, 4, 4)
		b.SiLUMul(a, e, s, 3)
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
		var wantG, wantS, wantA []float64
		for _, r := range []int{2, 0} {
			wantG = append(wantG, ref[int(step.Tokens[r])*4:int(step.Tokens[r])*4+4]...)
		}
		for _, id := range step.Tokens {
			for _, v := range ref[id*4 : id*4+4] {
				wantS = append(wantS, 2*v)
				wantA = append(wantA, v/(1+math.Exp(-v))*2*v)
			}
		}
		closeTo(t, name+" gather", g.f32, wantG, func(int) float64 { return 0 })
		closeTo(t, name+" add", s.f32, wantS, func(int) float64 { return 0 })
		closeTo(t, name+" silu", a.f32, wantA, func(int) float64 { return 1e-6 })
	}
}

// TestErrorsAreSticky checks that misuse becomes an error from Sync (never
// a panic), that later ops are skipped, and that Sync clears it.
func TestErrorsAreSticky(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	h, _ := hostWeight(rng, tensor.F32, 1, 10, 4)
	table := mustW(t, b, h)
	e := mustAlloc(t, b, tensor.F32, 2, 4)
	b.Embed(e, table)
	if err := b.Sync(); err == nil {
		t.Fatal("Embed without a step succeeded")
	}
	if err := b.SetStep(&backend.Step{Tokens: []int32{10}, Pos: []int32{0}, Seqs: []backend.Seq{{Len: 1}}}); err != nil {
		t.Fatal(err)
	}
	b.Embed(e, table)
	b.MatMul(e, e, table, 1) // would also fail; must be skipped
	if err := b.Sync(); err == nil {
		t.Fatal("out-of-vocabulary token accepted")
	} else {
		t.Log(err)
	}
	b.MatMul(e, e, table, 5) // shape mismatch
	if err := b.Sync(); err == nil {
		t.Fatal("MatMul shape mismatch accepted")
	}
	if _, err := b.Weight(backend.Host{Name: "bad", DType: tensor.BF16, Shape: []int{3}, Data: make([]byte, 4)}); err == nil {
		t.Fatal("short weight accepted")
	}
	if err := b.Sync(); err != nil {
		t.Fatalf("error not cleared: %v", err)
	}
}

func hostOf(dt tensor.DType, data []byte, shape ...int) backend.Host {
	return backend.Host{Name: "bench", DType: dt, Shape: shape, Data: data}
}

// TestWeightUnaligned checks that weights at an odd byte offset (a file
// whose header breaks alignment) are read correctly.
func TestWeightUnaligned(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		h, ref := hostWeight(rng, dt, 1, 3, 5)
		buf := make([]byte, len(h.Data)+1)
		copy(buf[1:], h.Data)
		h.Data = buf[1:]
		b := New(Options{Threads: 1})
		w := mustW(t, b, h)
		for i, want := range ref {
			if got := w.at(i); float64(got) != want {
				t.Fatalf("%s element %d = %v, want %v", dt, i, got, want)
			}
		}
		b.Close()
	}
}

// TestAttentionChecksEveryPage checks that Attention refuses a page table
// whose page for an already cached position lies outside the cache (read,
// not written, by this step) and a cache without a page size: errors from
// Sync, never an index panic.
func TestAttentionChecksEveryPage(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	const heads, hd, ps = 2, 4, 4
	kv, err := b.AllocKV(2, ps, heads, hd)
	if err != nil {
		t.Fatal(err)
	}
	q := mustAlloc(t, b, tensor.F32, 1, heads*hd)
	out := mustAlloc(t, b, tensor.F32, 1, heads*hd)
	p := &backend.Attn{Heads: heads, KVHeads: heads, HeadDim: hd, Scale: 0.5}
	step := &backend.Step{Tokens: []int32{1}, Pos: []int32{ps}, Seqs: []backend.Seq{{Slot: 3, Len: 1, Pos: ps, Pages: []int32{7, 0}}}}
	if err := b.SetStep(step); err != nil {
		t.Fatal(err)
	}
	b.Attention(out, q, q, q, kv, p, 1)
	if err := b.Sync(); err == nil || !strings.Contains(err.Error(), "slot 3 uses KV page 7 outside [0,2)") {
		t.Fatalf("page outside the cache: Sync returned %v", err)
	}
	step.Seqs[0].Pages[0] = 1
	b.Attention(out, q, q, q, kv, p, 1)
	if err := b.Sync(); err != nil {
		t.Fatalf("valid pages: %v", err)
	}
	noSize := *kv
	noSize.PageSize = 0
	b.Attention(out, q, q, q, &noSize, p, 1)
	if err := b.Sync(); err == nil || !strings.Contains(err.Error(), "page size 0") {
		t.Fatalf("page size 0: Sync returned %v", err)
	}
}

// TestEmbedVocab looks up two vocabulary shards of a table and checks
// that they add up to the whole table's lookup, each row from one shard.
func TestEmbedVocab(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	const V, H = 10, 3
	vals := make([]float32, V*H)
	for i := range vals {
		vals[i] = float32(i + 1)
	}
	whole := f32Tensor(t, b, vals, V, H)
	lo := f32Tensor(t, b, vals[:6*H], 6, H)
	hi := f32Tensor(t, b, vals[6*H:], 4, H)
	step := &backend.Step{Tokens: []int32{0, 5, 6, 9, 3}, Pos: []int32{0, 1, 2, 3, 4}, Seqs: []backend.Seq{{Len: 5}}}
	if err := b.SetStep(step); err != nil {
		t.Fatal(err)
	}
	n := len(step.Tokens)
	want, _ := b.Alloc(tensor.F32, n, H)
	a, _ := b.Alloc(tensor.F32, n, H)
	c, _ := b.Alloc(tensor.F32, n, H)
	b.Embed(want, whole)
	b.EmbedVocab(a, lo, 0)
	b.EmbedVocab(c, hi, 6)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for i, tok := range step.Tokens {
		for j := 0; j < H; j++ {
			x, y := a.(*Tensor).f32[i*H+j], c.(*Tensor).f32[i*H+j]
			if (tok < 6) != (y == 0) || (tok >= 6) != (x == 0) {
				t.Errorf("token %d col %d: shards %v and %v, one must be zero", tok, j, x, y)
			}
			if x+y != want.(*Tensor).f32[i*H+j] {
				t.Errorf("token %d col %d: shards add to %v, want %v", tok, j, x+y, want.(*Tensor).f32[i*H+j])
			}
		}
	}
}
