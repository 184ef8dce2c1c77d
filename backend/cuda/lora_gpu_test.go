//go:build cgo

package cuda

import (
	"testing"

	"github.com/ktserve/kt/backend"
)

// TestLoRAAdd checks the masked scaled add against the CPU backend's op on
// a mixed step (sequences with adapters 0, 1, 0, 1, 2): the named adapter's
// rows only, then every row (a static adapter), at a q_proj-like width and
// at an odd one; rows past n are left alone. It then runs a second step
// with another adapter mix on the same buffers (SetStep rewrites the
// per-row adapter ids). It skips without a GPU.
func TestLoRAAdd(t *testing.T) {
	p := newOpPair(t)
	steps := []*backend.Step{
		testStep([3]int{0, 0, 37}, [3]int{1, 50, 20}, [3]int{2, 200, 1}, [3]int{3, 5, 9}, [3]int{4, 9, 1}),
		testStep([3]int{0, 37, 1}, [3]int{1, 70, 1}, [3]int{2, 201, 1}),
	}
	steps[0].Seqs[1].Adapter, steps[0].Seqs[3].Adapter, steps[0].Seqs[4].Adapter = 1, 1, 2
	steps[1].Seqs[0].Adapter = 1
	for si, s := range steps {
		T := len(s.Tokens)
		for _, w := range []int{4096, 77} {
			p.setStep(t, s)
			out := p.randF32(T*w, 1)
			gOut, cOut := p.act(t, out, T, w)
			gD, cD := p.act(t, p.randF32(T*w, 0.1), T, w)
			for _, c := range []struct {
				adapter, n int
				scale      float32
			}{{1, T, 2}, {2, T, 0.5}, {-1, T, 1.25}, {1, T - 1, 3}, {0, T, 1}} {
				p.g.LoRAAdd(gOut, gD, c.scale, c.adapter, c.n)
				p.c.LoRAAdd(cOut, cD, c.scale, c.adapter, c.n)
			}
			p.compare(t, "LoRAAdd", gOut, cOut, T, 1e-6)
			// the op did add: the result differs from the input
			got := make([]float32, T*w)
			if err := p.g.Read(got, gOut, T); err != nil {
				t.Fatal(err)
			}
			moved := 0
			for i := range got {
				if got[i] != out[i] {
					moved++
				}
			}
			if moved < T*w/2 {
				t.Errorf("step %d width %d: only %d of %d values changed", si, w, moved, T*w)
			}
		}
	}
	// refusals: mismatched widths, more rows than the step
	g := p.g
	p.setStep(t, steps[1])
	a, _ := p.act(t, nil, 3, 8)
	d, _ := p.act(t, nil, 3, 9)
	g.LoRAAdd(a, d, 1, 1, 3)
	if err := g.Sync(); err == nil {
		t.Fatal("LoRAAdd with widths 8 and 9: no error")
	}
}
