//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestOtherModelShapes runs every method on layer shapes whose block
// counts differ from the Qwen3 shapes the engine was tuned on — odd
// numbers of 128-column blocks in the hidden and intermediate sizes, as in
// DeepSeek-V2-Lite and GLM-4.5-Air (intermediate 1408 = 11 blocks) or
// Qwen2-57B (hidden 3584 = 28 blocks) — at every kernel level of this CPU
// (and the emulated AMX kernels), for 1, 5 and 24 tokens (the decode and
// prefill kernels), with one and two pools: each run must match the f32
// reference within the method's bound, or, where a pool's intermediate
// slice does not fit the method's blocks, be refused saying so. A third
// shape (hidden 1152 = 9 blocks, intermediate 768 as Qwen3-30B) runs with
// KT_TEST_REAL_SHAPES=1.
func TestOtherModelShapes(t *testing.T) {
	const topK = 3
	shapes := []LayerSpec{
		{Experts: 4, Hidden: 640, Intermediate: 1408},
		{Experts: 6, Hidden: 384, Intermediate: 384},
	}
	if os.Getenv("KT_TEST_REAL_SHAPES") != "" {
		shapes = append(shapes, LayerSpec{Experts: 4, Hidden: 1152, Intermediate: 768})
	}
	srcs := sourceCache{}
	for _, shape := range shapes {
		refs := map[string][]float32{}
		for _, isa := range testLevels(t) {
			for _, pools := range []int{1, 2} {
				for _, m := range Methods {
					spec := shape
					spec.Method = m
					src := srcs.get(m, shape)
					name := fmt.Sprintf("H%d-I%d/%s/pools%d/%s", shape.Hidden, shape.Intermediate, isa, pools, m)
					e, err := NewEngine(withISA(Config{Threads: 2 * pools, Pools: pools, MaxTokens: 24, TopK: topK,
						Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate}, isa))
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					l, err := e.NewLayer(spec, src)
					if err != nil {
						e.Close()
						if ip := shape.Intermediate / pools; ip%128 != 0 && strings.Contains(err.Error(), "multiple of 128") {
							continue // refused, and why: the slice is not whole 128-row blocks
						}
						t.Fatalf("%s: %v", name, err)
					}
					for _, tokens := range []int{1, 5, 24} {
						x, ids, w := RandomBatch(uint64(tokens)+uint64(shape.Hidden), tokens, topK, spec.Hidden, spec.Experts)
						out := make([]float32, tokens*spec.Hidden)
						if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
							t.Fatalf("%s/tok%d: %v", name, tokens, err)
						}
						key := fmt.Sprintf("%s/%d", m, tokens)
						ref, ok := refs[key]
						if !ok {
							if ref, err = Reference(src, spec, x, tokens, topK, ids, w, nil); err != nil {
								t.Fatal(err)
							}
							refs[key] = ref
						}
						if re := relErr(out, ref); !(re < maxErr[m]) {
							t.Errorf("%s/tok%d (%s): relative error %.5f, want < %.3f", name, tokens, e.Kernels(m), re, maxErr[m])
						}
					}
					l.Close()
					e.Close()
				}
			}
		}
	}
}
