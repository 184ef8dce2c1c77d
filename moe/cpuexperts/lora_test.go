//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randomLoRA(seed uint64, spec LayerSpec, r int) *LoRA {
	rng := rand.New(rand.NewPCG(seed, 1))
	E, H, I := spec.Experts, spec.Hidden, spec.Intermediate
	f := func(n int, sd float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * sd)
		}
		return v
	}
	return &LoRA{Rank: r, Scale: 2, GateA: f(E*r*H, 0.05), GateB: f(E*I*r, 0.05), UpA: f(E*r*H, 0.05),
		UpB: f(E*I*r, 0.05), DownA: f(E*r*I, 0.05), DownB: f(E*H*r, 0.05)}
}

// referenceLoRA is Reference with expert LoRA, in float64.
func referenceLoRA(t *testing.T, src Source, spec LayerSpec, lo *LoRA, x []float32, tokens, topK int, ids []int32, wts []float32) []float32 {
	t.Helper()
	H, I, r := spec.Hidden, spec.Intermediate, lo.Rank
	s := float64(lo.Scale)
	out := make([]float32, tokens*H)
	delta := func(a, b []float32, v []float64, in, outN int) []float64 {
		mid := make([]float64, r)
		for j := 0; j < r; j++ {
			for k := 0; k < in; k++ {
				mid[j] += float64(a[j*in+k]) * v[k]
			}
		}
		d := make([]float64, outN)
		for o := range d {
			for j := 0; j < r; j++ {
				d[o] += float64(b[o*r+j]) * mid[j]
			}
		}
		return d
	}
	for tk := 0; tk < tokens; tk++ {
		xt := make([]float64, H)
		for k := range xt {
			xt[k] = float64(x[tk*H+k])
		}
		for j := 0; j < topK; j++ {
			e := int(ids[tk*topK+j])
			if e < 0 || e >= spec.Experts {
				continue
			}
			var m [3][]float32
			for p := Gate; p <= Down; p++ {
				mat, err := src.Matrix(e, p)
				if err != nil {
					t.Fatal(err)
				}
				var buf []float32
				m[p] = append([]float32(nil), widen(mat, &buf)...)
			}
			dg := delta(lo.GateA[e*r*H:], lo.GateB[e*I*r:], xt, H, I)
			du := delta(lo.UpA[e*r*H:], lo.UpB[e*I*r:], xt, H, I)
			h := make([]float64, I)
			for i := 0; i < I; i++ {
				var g, u float64
				for k := 0; k < H; k++ {
					g += float64(m[Gate][i*H+k]) * xt[k]
					u += float64(m[Up][i*H+k]) * xt[k]
				}
				g += s * dg[i]
				u += s * du[i]
				h[i] = g / (1 + math.Exp(-g)) * u
			}
			dd := delta(lo.DownA[e*r*I:], lo.DownB[e*H*r:], h, I, H)
			w := float64(wts[tk*topK+j])
			for o := 0; o < H; o++ {
				var d float64
				for i := 0; i < I; i++ {
					d += float64(m[Down][o*I+i]) * h[i]
				}
				out[tk*H+o] += float32(w * (d + s*dd[o]))
			}
		}
	}
	return out
}

// TestLoRAAgainstReference runs every method with expert LoRA (one and two
// pools, the decode and prefill kernels, f32 and bf16 activations) against
// the float64 reference, and checks the LoRA moves the output by far more
// than the bf16 methods' error (0: they match the reference exactly, so a
// dropped term would show).
func TestLoRAAgainstReference(t *testing.T) {
	const topK, rank = 4, 8
	for _, run := range []struct {
		pools int
		isa   ISA
	}{{1, ISAAuto}, {2, ISAAuto}, {1, ISAAVX2}} { // AVX2: kern_lora.c's plain-C dot products
		pools := run.pools
		if testing.Short() && (pools == 2 || run.isa != ISAAuto) {
			continue // the float64 reference is slow under -race
		}
		for _, m := range Methods {
			spec := small
			spec.Method = m
			src := sourceFor(m, spec)
			lo := randomLoRA(3, spec, rank)
			e := newEngine(t, spec, pools, 2*pools, 64, topK, run.isa)
			l, err := e.NewLayer(spec, src)
			if err != nil {
				if run.isa == ISAAVX2 {
					t.Logf("%s on AVX2: %v", m, err)
					continue
				}
				t.Fatal(err)
			}
			if err := l.SetLoRA(lo); err != nil {
				t.Fatal(err)
			}
			for _, tokens := range []int{1, 48} {
				name := fmt.Sprintf("pools%d/%s/%s/tok%d", pools, run.isa, m, tokens)
				x, ids, w := RandomBatch(uint64(tokens), tokens, topK, spec.Hidden, spec.Experts)
				out := make([]float32, tokens*spec.Hidden)
				if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
					t.Fatal(err)
				}
				ref := referenceLoRA(t, src, spec, lo, x, tokens, topK, ids, w)
				base, err := Reference(src, spec, x, tokens, topK, ids, w, nil)
				if err != nil {
					t.Fatal(err)
				}
				re, effect := relErr(out, ref), relErr(base, ref)
				t.Logf("%s: rel err %.5f (LoRA effect %.3f)", name, re, effect)
				if !(re < maxErr[m]) || !(effect > 0.1) {
					t.Errorf("%s: relative error %.5f (want < %.3f), LoRA effect %.3f (want > 0.1)", name, re, maxErr[m], effect)
				}
			}
			l.Close()
		}
	}
}

// BenchmarkLoRA times one Qwen3.5-35B-A3B-shaped layer (hidden 2048,
// intermediate 512, top-8 of 32 experts) without and with expert LoRA of
// rank 8 and 32, at 1, 16 and 128 tokens, on all cores: the LoRA overhead
// kern_lora.c adds per task.
func BenchmarkLoRA(b *testing.B) {
	spec := LayerSpec{Method: AMXINT8, Experts: 32, Hidden: 2048, Intermediate: 512}
	for _, m := range []Method{AMXINT8, AMXBF16} {
		spec.Method = m
		src := sourceFor(m, spec)
		for _, rank := range []int{0, 8, 32} {
			e, err := NewEngine(Config{MaxTokens: 128, TopK: 8, Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate})
			if err != nil {
				b.Fatal(err)
			}
			l, err := e.NewLayer(spec, src)
			if err != nil {
				b.Fatal(err)
			}
			if rank > 0 {
				if err := l.SetLoRA(randomLoRA(5, spec, rank)); err != nil {
					b.Fatal(err)
				}
			}
			for _, tokens := range []int{1, 16, 128} {
				x, ids, w := RandomBatch(1, tokens, 8, spec.Hidden, spec.Experts)
				batch := &Batch{Tokens: tokens, TopK: 8, X: x, IDs: ids, Weights: w, Out: make([]float32, tokens*spec.Hidden)}
				b.Run(fmt.Sprintf("%s/r%d/tok%d", m, rank, tokens), func(b *testing.B) {
					for b.Loop() {
						if err := l.Forward(batch); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			l.Close()
			e.Close()
		}
	}
}
