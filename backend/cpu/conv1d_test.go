package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// naiveConv is the float64 causal depthwise conv1d + SiLU over a whole
// sequence with zero history.
func naiveConv(x []float32, n, ch int, w []float32, kernel int) []float64 {
	out := make([]float64, n*ch)
	for t := 0; t < n; t++ {
		for c := 0; c < ch; c++ {
			var acc float64
			for k := 0; k < kernel; k++ {
				s := t - kernel + 1 + k
				if s >= 0 {
					acc += float64(w[c*kernel+k]) * float64(x[s*ch+c])
				}
			}
			out[t*ch+c] = acc / (1 + math.Exp(-acc))
		}
	}
	return out
}

func TestCausalConv1D(t *testing.T) {
	for _, kernel := range []int{1, 2, 4} {
		for _, n := range []int{1, 3, 4, 9, 70} {
			t.Run(fmt.Sprintf("k%d/n%d", kernel, n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(kernel), uint64(n)))
				ch := 6
				x := make([]float32, n*ch)
				w := make([]float32, ch*kernel)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				for i := range w {
					w[i] = float32(rng.NormFloat64())
				}
				want := naiveConv(x, n, ch, w, kernel)
				whole := make([]float32, n*ch)
				if err := CausalConv1D(x, n, ch, w, kernel, make([]float32, (kernel-1)*ch), whole); err != nil {
					t.Fatal(err)
				}
				if e, at := maxErr(whole, want); e > 1e-6 {
					t.Fatalf("error %g at %d", e, at)
				}
				// Split into calls of every size: identical bits.
				for step := 1; step <= n; step++ {
					state := make([]float32, (kernel-1)*ch)
					got := make([]float32, n*ch)
					for p := 0; p < n; p += step {
						m := min(step, n-p)
						if err := CausalConv1D(x[p*ch:], m, ch, w, kernel, state, got[p*ch:]); err != nil {
							t.Fatal(err)
						}
					}
					for i := range got {
						if got[i] != whole[i] {
							t.Fatalf("step %d: out[%d] = %g, want %g", step, i, got[i], whole[i])
						}
					}
				}
			})
		}
	}
}

func TestCausalConv1DRejectsBadShapes(t *testing.T) {
	x := make([]float32, 8)
	cases := []struct {
		name                string
		n, ch, kernel, wlen int
		slen                int
	}{
		{"zero kernel", 1, 2, 0, 0, 0},
		{"short weight", 1, 2, 4, 7, 6},
		{"short state", 1, 2, 4, 8, 4},
		{"too many rows", 5, 2, 4, 8, 6},
	}
	for _, c := range cases {
		if err := CausalConv1D(x, c.n, c.ch, make([]float32, c.wlen), c.kernel, make([]float32, c.slen), x); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}
