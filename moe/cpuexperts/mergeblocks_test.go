//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"
)

// TestMergeBlocksBitwise checks the phased path's interleaved down and merge
// (down_merge in engine.c): with Y holding 1, 2 or 3 hidden blocks (stored
// around the caches or through them), so that
// down items reuse places whose merges must have finished, on one pool and
// two, with expert LoRA (its down delta goes to the block's place in Y), the
// output is bitwise that of merging after all down items (MergeBlocks -1).
// The shape gives 4-8 hidden blocks: few experts, a wide hidden size; the
// decode path is off (it merges per block by itself).
func TestMergeBlocksBitwise(t *testing.T) {
	const tokens, topK = 48, 2
	spec := LayerSpec{Experts: 4, Hidden: 1024, Intermediate: 256}
	srcs := sourceCache{}
	for _, isa := range testLevels(t) {
		for _, m := range []Method{AMXBF16, AMXINT8} {
			spec.Method = m
			src := srcs.get(m, spec)
			x, ids, w := RandomBatch(11, tokens, topK, spec.Hidden, spec.Experts)
			for _, pools := range []int{1, 2} {
				for _, lora := range []bool{false, true} {
					var want []float32
					for _, v := range []struct {
						mb     int
						cached bool
					}{{-1, false}, {1, false}, {2, false}, {3, true}, {0, false}, {1, true}} {
						mb := v.mb
						name := fmt.Sprintf("%s/%s/pools%d/lora=%v/merge-blocks%d/cached=%v", isa, m, pools, lora, mb, v.cached)
						e, err := NewEngine(withISA(Config{Threads: 8, Pools: pools, MaxTokens: tokens, TopK: topK,
							Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate, MergeBlocks: mb, MergeCached: v.cached, fusedMaxSlots: -1}, isa))
						if err != nil {
							t.Fatal(err)
						}
						l, err := e.NewLayer(spec, src)
						if err != nil {
							t.Fatal(err)
						}
						if lora {
							if err := l.SetLoRA(randomLoRA(5, spec, 4)); err != nil {
								t.Fatal(err)
							}
						}
						for rep := 0; rep < 2; rep++ {
							out := make([]float32, tokens*spec.Hidden)
							if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							if want == nil {
								want = out
								continue
							}
							for i := range out {
								if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
									t.Fatalf("%s rep %d: out[%d] = %g, merged after all down items: %g", name, rep, i, out[i], want[i])
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
}
