//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// TestBF16InputInPlace checks the phased path's bf16 input read where it is
// (bf16 activations, one pool: no converted copy) and copied (two pools)
// against the same values given as f32 rows, which are converted: the
// outputs must be bitwise equal, at every kernel level with bf16
// activations, for experts gathered per item and in slot order.
func TestBF16InputInPlace(t *testing.T) {
	const topK = 4
	srcs := sourceCache{}
	for _, isa := range testLevels(t) {
		for _, m := range []Method{AMXBF16, BF16} {
			spec := small
			spec.Method = m
			src := srcs.get(m, spec)
			for _, pools := range []int{1, 2} {
				for _, tokens := range []int{40, 200} { // 200: some experts over the AMX prefill minimum
					e, err := NewEngine(withISA(Config{Threads: 3 * pools, Pools: pools, MaxTokens: tokens, TopK: topK,
						Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate, fusedMaxSlots: -1}, isa))
					if err != nil {
						t.Fatal(err)
					}
					l, err := e.NewLayer(spec, src)
					if err != nil {
						t.Fatal(err)
					}
					x, ids, w := RandomBatch(21, tokens, topK, spec.Hidden, spec.Experts)
					xb := make([]uint16, len(x))
					for i, v := range x {
						xb[i] = tensor.F32ToBF16(v)
						x[i] = tensor.BF16ToF32(xb[i])
					}
					name := fmt.Sprintf("%s/%s/pools%d/tok%d", isa, m, pools, tokens)
					want := make([]float32, tokens*spec.Hidden)
					if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: want}); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					for rep := 0; rep < 2; rep++ {
						got := make([]float32, tokens*spec.Hidden)
						if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, XBF16: xb, IDs: ids, Weights: w, Out: got}); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s rep %d: out[%d] = %g from bf16 rows, %g from the same f32 rows", name, rep, i, got[i], want[i])
							}
						}
					}
					l.Close()
					e.Close()
				}
			}
		}
	}
}
