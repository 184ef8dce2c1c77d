//go:build cgo

package cuda

import (
	"fmt"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/tensor"
)

// TestMoEGrouped checks the MoE op's grouped path (each expert's rows as
// cuBLASLt GEMMs over expert-sorted rows, activations split in two bf16
// parts) against the CPU op, beside the per-pair kernels it replaces for
// prefill-sized steps: uniform and skewed routing (experts with no rows,
// experts with many BM blocks), ids of experts served elsewhere (-1), one
// token with the path forced on, and f32 weights (which keep the per-pair
// kernels). It skips without a GPU.
func TestMoEGrouped(t *testing.T) {
	p := newOpPair(t)
	const E, H, I, k = 64, 512, 256, 8
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
		runs0 := p.g.MoEGroupedRuns()
		ex := [2]backend.Experts{{Hidden: H, Inter: I}, {Hidden: H, Inter: I}}
		for e := 0; e < E; e++ {
			for j := range 3 {
				shape := []int{I, H}
				if j == 2 {
					shape = []int{H, I}
				}
				g, c := p.weight(t, fmt.Sprintf("expert %d.%d", e, j), dt, p.randF32(H*I, 0.05), shape...)
				for i, x := range []backend.Tensor{g, c} {
					dst := []*[]backend.Tensor{&ex[i].Gate, &ex[i].Up, &ex[i].Down}[j]
					*dst = append(*dst, x)
				}
			}
		}
		for _, tc := range []struct {
			name   string
			n      int
			min    int                // SetMoEGroupedMin
			expert func(t, j int) int // the j-th pick of token t
		}{
			{"uniform", 600, 0, func(t, j int) int { return (t*7 + j*9) % E }},
			{"skewed", 600, 0, func(t, j int) int {
				if j < 4 {
					return j // experts 0-3 take every token: 600 rows each
				}
				return 8 + (t*3+j)%20 // 8-27; 4-7 and 28-63 none
			}},
			{"elsewhere", 560, 0, func(t, j int) int {
				if (t+j)%5 == 0 {
					return -1
				}
				return (t*5 + j*11) % E
			}},
			{"one token forced", 1, 1, func(t, j int) int { return j * 3 }},
		} {
			name := fmt.Sprintf("%s %s", dt, tc.name)
			ids := make([]int32, tc.n*k)
			for i := range ids {
				ids[i] = int32(tc.expert(i/k, i%k))
			}
			gi, ci := p.ids(t, tc.n, k)
			if err := p.g.write(gi, ids); err != nil {
				t.Fatal(err)
			}
			copy(ci.(*cpu.Tensor).I32(), ids)
			gx, cx := p.act(t, p.randF32(tc.n*H, 1), tc.n, H)
			gw, cw := p.act(t, p.randF32(tc.n*k, 0.3), tc.n, k)
			_, cout := p.act(t, nil, tc.n, H)
			p.c.MoE(cout, cx, &ex[1], cw, ci, tc.n)
			for _, min := range []int{tc.min, -1} { // the path, then the per-pair kernels
				gout, _ := p.act(t, nil, tc.n, H)
				p.g.SetMoEGroupedMin(min)
				p.g.MoE(gout, gx, &ex[0], gw, gi, tc.n)
				p.compare(t, fmt.Sprintf("%s, grouped min %d", name, min), gout, cout, tc.n, 2e-5)
			}
			p.g.SetMoEGroupedMin(0)
		}
		want := 0 // f32 weights keep the per-pair kernels
		if dt == tensor.BF16 {
			want = 4 // every case's first call
		}
		if runs := p.g.MoEGroupedRuns() - runs0; runs != want || p.g.moeG.off {
			t.Fatalf("%s: %d MoE calls took the grouped path (refused %v), want %d", dt, runs, p.g.moeG.off, want)
		}
	}
}
