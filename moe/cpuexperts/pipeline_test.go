//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"testing"
	"time"
)

// TestMergePipelineBitwise checks that the phased path's down/merge
// pipeline (Config.MergePipeline: hidden-block-major down items, each
// block's merge as soon as its down items are done, slot outputs in a ring
// of blocks) gives bitwise the output of the default merge after a barrier, with the
// smallest ring (2 blocks, so down items wait for merges), the default
// (3), and one block per hidden block (no reuse). The shape gives 4 hidden
// blocks on one pool of 12 threads and on two pools of 6 (engine.c
// down_merge_plan), and 24 merge items per block; some experts are in the
// skip mask and some ids are -1. Each engine runs the batch twice (the
// pipeline's counters are reset per task), plain and incremental.
func TestMergePipelineBitwise(t *testing.T) {
	const topK, tokens = 4, 96
	spec := LayerSpec{Experts: 16, Hidden: 1024, Intermediate: 128}
	srcs := sourceCache{}
	for _, isa := range testLevels(t) {
		for _, m := range []Method{AMXBF16, AMXINT8, BF16} {
			spec.Method = m
			src := srcs.get(m, spec)
			x, ids, w := RandomBatch(17, tokens, topK, spec.Hidden, spec.Experts)
			for i := 0; i < len(ids); i += 7 {
				ids[i] = -1
			}
			for _, pools := range []int{1, 2} {
				var ref []float32
				for _, ring := range []int{-1, 2, 0, 4} { // -1: merge after a barrier (the reference)
					name := fmt.Sprintf("%s/%s/pools%d/ring%d", isa, m, pools, ring)
					e := newEngineCfg(t, withISA(Config{Threads: 12, Pools: pools, MaxTokens: tokens, TopK: topK,
						Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate, fusedMaxSlots: -1,
						MergePipeline: ring >= 0, MergeRing: max(ring, 0)}, isa))
					l, err := e.NewLayer(spec, src)
					if err != nil {
						t.Fatal(err)
					}
					l.SkipMask()[3], l.SkipMask()[10] = 1, 1
					out := make([]float32, 2*tokens*spec.Hidden) // plain, then incremental onto the plain result
					for rep := 0; rep < 2; rep++ {
						if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out[:tokens*spec.Hidden]}); err != nil {
							t.Fatal(err)
						}
					}
					inc := out[tokens*spec.Hidden:]
					copy(inc, out[:tokens*spec.Hidden])
					if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: inc, Incremental: true}); err != nil {
						t.Fatal(err)
					}
					l.Close()
					if ref == nil {
						ref = out
						continue
					}
					if d := diffCount(ref, out); d > 0 {
						t.Errorf("%s: %d of %d outputs differ from the merge after a barrier", name, d, len(ref))
					}
				}
			}
		}
	}
}

// TestEarlyStartBitwise checks that starting a phased task's workers
// before it is routed (they convert the rows while the queue thread routes)
// gives bitwise the output of routing first (Config.RouteFirst), for the
// int8, int4 and bf16 activations, one and two pools (the fused path is
// unaffected and checked alongside).
func TestEarlyStartBitwise(t *testing.T) {
	for _, c := range pairCases(t, []Method{AMXBF16, AMXINT8, AMXINT4}, 23, true) {
		out := forwardPair(t, c, func(cfg *Config) { cfg.RouteFirst = true })
		// the workers start long before the routing (does every pool wait for it?)
		late := forwardPair(t, c, func(cfg *Config) { cfg.testRouteDelay = 20 * time.Millisecond })
		if d := diffCount(out[0], late[1]); d > 0 {
			t.Errorf("%s: %d of %d outputs differ when the routing comes 20 ms after the workers start", c.name, d, len(out[0]))
		}
		if d := diffCount(out[0], out[1]); d > 0 {
			t.Errorf("%s: %d of %d outputs differ between early start and routing first", c.name, d, len(out[0]))
		}
	}
}

// TestDownKernelRoundsBitwise checks that the AMX down kernels rounding
// their sums straight into the bf16 slot outputs give bitwise the output of
// f32 rows rounded by a second pass (Config.DownViaF32), for the bf16, int8
// and int4 cores, on the phased and fused paths (where the AMX kernels run:
// the real or the emulated AMX level), with non-temporal and cached slot
// outputs. Special values (a NaN-free batch with large and tiny rows) take
// the rounding's carry and exponent edges.
func TestDownKernelRoundsBitwise(t *testing.T) {
	for _, c := range pairCases(t, []Method{AMXBF16, AMXINT8, AMXINT4}, 29, true) {
		for i := range c.x {
			switch i % 97 {
			case 0:
				c.x[i] *= 1e4
			case 1:
				c.x[i] *= 1e-4
			}
		}
		for _, cached := range []bool{false, true} {
			c.ref = nil // no reference for the scaled rows: bitwise against each other only
			c.base = func(cfg *Config) { cfg.SlotOutputsCached = cached }
			out := forwardPair(t, c, func(cfg *Config) { cfg.DownViaF32 = true })
			if d := diffCount(out[0], out[1]); d > 0 {
				t.Errorf("%s/cached=%v: %d of %d outputs differ between the kernel's rounding and a second pass", c.name,
					cached, d, len(out[0]))
			}
		}
	}
}
