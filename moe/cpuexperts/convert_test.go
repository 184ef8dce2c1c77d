//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestQuantizeRowMatchesPortable: the AVX2 and AVX-512 int8 activation
// quantization (convert.h, hand-vectorized maximum) gives the portable
// reference's scale and values for every row length around the vector
// widths, rows whose largest |x| is in the scalar tail or negative, all-zero
// rows and rows with NaNs (skipped by the maximum, quantized to 0).
func TestQuantizeRowMatchesPortable(t *testing.T) {
	widths := vectorWidths(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 2048, 2049} {
		for c := range 6 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			switch c {
			case 1:
				x[n-1] = -40 // the largest |x| in the tail, negative
			case 2:
				clear(x)
			case 3:
				x[rng.IntN(n)] = float32(math.NaN())
			case 4:
				x[0] = float32(math.Copysign(0, -1))
				x[n/2] = 1e-30
			case 5:
				x[rng.IntN(n)] = -1e4
			}
			wq := make([]int8, n)
			ws := quantizeRowS8(0, x, wq, nil)
			for _, w := range widths {
				q := make([]int8, n)
				s := quantizeRowS8(w, x, q, make([]float32, n))
				if math.Float32bits(s) != math.Float32bits(ws) {
					t.Fatalf("width %d, n %d, case %d: scale %g, portable %g", w, n, c, s, ws)
				}
				for i := range q {
					if q[i] != wq[i] {
						t.Fatalf("width %d, n %d, case %d: q[%d] = %d, portable %d (x %g)", w, n, c, i, q[i], wq[i], x[i])
					}
				}
			}
		}
	}
}

// BenchmarkQuantizeRowS8 times the int8 activation quantization of one
// 2048-wide row (in cache) at each vector width the CPU has, beside the
// portable reference (pack.c) in the same run.
func BenchmarkQuantizeRowS8(b *testing.B) {
	f := DetectFeatures()
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 2048)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	q, tmp := make([]int8, len(x)), make([]float32, len(x))
	for _, w := range []int{0, 256, 512} {
		if (w == 256 && !f.AVX2) || (w == 512 && !f.AVX512) {
			continue
		}
		b.Run(fmt.Sprintf("width%d", w), func(b *testing.B) {
			b.SetBytes(int64(len(x) * 4))
			for b.Loop() {
				quantizeRowS8(w, x, q, tmp)
			}
		})
	}
}

// vectorWidths lists the vector widths of this CPU's conversion and SiLU
// kernels (256: AVX2, 512: AVX-512); it skips the test without AVX2.
func vectorWidths(tb testing.TB) []int {
	f := DetectFeatures()
	var w []int
	if f.AVX2 {
		w = append(w, 256)
	}
	if f.AVX512 {
		w = append(w, 512)
	}
	if len(w) == 0 {
		tb.Skip("no AVX2")
	}
	return w
}

// TestSiLUMulAccuracy bounds the SiLU kernels' error against float64 over
// gate values from -100 to 100, every row length around the vector widths
// (the scalar tail), and exact zeros: at most 4 float32 ulps of the result,
// or 1e-30 absolute where g < -88 clamps the exponential (the result is
// then under 1e-36 instead of a denormal), and silu(0)·u exactly 0
// (measured: up to 3 ulps). BenchmarkSiLUMul: 207 ns per 32 x 32 block
// with AVX-512 on the dev VM, ~2% of that block's int8 gate/up tile work on
// the device (~9 us), so the division stays.
func TestSiLUMulAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, w := range vectorWidths(t) {
		worst := 0.0
		for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 32, 1000} {
			g, u, h := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range g {
				g[i] = float32((rng.Float64()*2 - 1) * 100)
				if i%5 == 0 {
					g[i] = float32(rng.NormFloat64() * 4) // where SiLU bends
				}
				u[i] = float32(rng.NormFloat64())
			}
			g[0] = 0
			siluMul(w, g, u, h)
			for i := range h {
				gi, ui := float64(g[i]), float64(u[i])
				want := gi / (1 + math.Exp(-gi)) * ui
				ulp := math.Abs(float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want)))
				if want == 0 {
					ulp = math.SmallestNonzeroFloat32
				}
				d := math.Abs(float64(h[i]) - want)
				if gi < -88 && d < 1e-30 {
					continue
				}
				e := d / ulp
				worst = math.Max(worst, e)
				if e > 4 {
					t.Fatalf("width %d, n %d: silu(%g)·%g = %g, want %g (%.1f ulps)", w, n, g[i], u[i], h[i], want, e)
				}
			}
		}
		t.Logf("width %d: worst %.2f ulps", w, worst)
	}
}

// BenchmarkSiLUMul times h = silu(g)·u over one 32 x 32 block of the
// gate/up epilogue (1024 values), per vector width.
func BenchmarkSiLUMul(b *testing.B) {
	for _, w := range vectorWidths(b) {
		b.Run(fmt.Sprint(w), func(b *testing.B) {
			g, u, h := make([]float32, 1024), make([]float32, 1024), make([]float32, 1024)
			for i := range g {
				g[i], u[i] = float32(i%17)-8, 1
			}
			for b.Loop() {
				siluMul(w, g, u, h)
			}
		})
	}
}
