//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"
)

// TestWholeItemsBitwise checks that the phased path's work split (whole
// experts first, split ones last, in gate/up and in down) gives bitwise the
// output of fixed slices, on a task where it applies: 256 tokens x 4 over
// 16 experts (64 per expert) and 5 threads per pool, so 6 of the 16 experts
// are whole items in both phases (gate/up slices of 64 rows, down slices of
// 128); with 8 threads per pool (16 experts, at most 2 x 8) every item is a
// slice. AMXINT8 checks the count that hands an
// expert's h to the quantization after its last gate/up item; one and two
// pools; every kernel level, the AMX path emulated where the CPU has none.
func TestWholeItemsBitwise(t *testing.T) {
	const topK, tokens = 4, 256
	srcs := sourceCache{}
	for _, isa := range testLevels(t) {
		for _, m := range []Method{AMXBF16, AMXINT8} {
			spec := small
			spec.Method = m
			src := srcs.get(m, spec)
			x, ids, w := RandomBatch(9, tokens, topK, spec.Hidden, spec.Experts)
			for _, pools := range []int{1, 2} {
				name := fmt.Sprintf("%s/%s/pools%d", isa, m, pools)
				var out [2][]float32
				for i, threads := range []int{5, 8} {
					e := newEngineCfg(t, withISA(Config{Threads: threads * pools, Pools: pools, MaxTokens: tokens, TopK: topK,
						Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate}, isa))
					l, err := e.NewLayer(spec, src)
					if err != nil {
						t.Fatal(err)
					}
					out[i] = make([]float32, tokens*spec.Hidden)
					for rep := 0; rep < 2; rep++ {
						if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out[i]}); err != nil {
							t.Fatal(err)
						}
					}
					l.Close()
				}
				if d := diffCount(out[0], out[1]); d > 0 {
					t.Errorf("%s: %d of %d outputs differ between whole-expert and split items", name, d, len(out[0]))
				}
			}
		}
	}
}

// diffCount counts the positions where a and b differ bitwise.
func diffCount(a, b []float32) int {
	n := 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			n++
		}
	}
	return n
}
