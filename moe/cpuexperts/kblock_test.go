//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"
)

// TestAMXKBlockBitwise checks that the K blocking of the AMX prefill
// kernels, their prefetch and the prefill chunk do not change results:
// whole K, blocks of 1 tile step and of 3 (which leaves a short last
// block), chunks of 32 and 64 tokens (several kernel calls per item) give
// bitwise equal outputs. On CPUs without AMX the K block and prefetch are
// ignored by the AVX-512 kernels; the chunk applies to every prefill kernel
// (checked on the best level: the chunking is in the engine, not in the
// kernels), and there every knob is checked with the AMX kernels emulated
// (amxEmuLevel; fewer tokens, the emulation is slow).
// It also checks that the phase timers count the tasks.
func TestAMXKBlockBitwise(t *testing.T) {
	const topK = 4
	lv := levels(t)[:1] // the best level: AMX where the CPU has it
	if emuAMX() {
		lv = append(lv, amxEmuLevel)
	}
	srcs := sourceCache{}
	for _, isa := range lv {
		tokens := 300 // ~150 tokens per expert
		if isa == amxEmuLevel {
			tokens = 140 // ~70 per expert: still 3 kernel calls an item with 32-token chunks
		}
		for _, m := range []Method{AMXBF16, AMXINT8, AMXINT4, INT4KGroup, BF16} {
			spec := small
			spec.Method, spec.Experts = m, 8
			src := srcs.get(m, spec)
			x, ids, w := RandomBatch(11, tokens, topK, spec.Hidden, spec.Experts)
			ids[5] = -1
			var ref []float32
			// K block (gate/up, down: 0 = kb), prefetch, chunk, prefetched tiles (1 + pft); K slabs (bytes: -1 none,
			// 4096 several slabs of every call here) and row blocks per slab group
			// and int4 steps unpacked at a time
			type knobs struct {
				kb, kbDown, pf, chunk, pft int
				slab                       int64
				grp, i4                    int
				t1                         int // AMXTileT1
			}
			configs := []knobs{{-1, 0, -1, 0, 0, -1, 0, 0, 0}, {-1, 0, 1, 32, 0, 0, 0, 0, 0}}
			if isa == ISAAMX || isa == amxEmuLevel {
				configs = append(configs, knobs{1, 0, 2, 0, 0, 0, 0, 0, 0}, knobs{3, 0, 0, 64, 0, 0, 0, 0, 0}, knobs{-1, 0, 1, 0, 1, 0, 0, 0, 0}, knobs{3, 0, 2, 64, 1, 0, 0, 0, 0},
					knobs{3, -1, 0, 0, 0, 0, 0, 0, 0}, knobs{-1, 2, 0, 0, 0, 0, 0, 0, 0},
					knobs{-1, 0, 0, 0, 0, 4096, 0, 0, 0}, knobs{1, 0, 2, 32, 0, 4096, 3, 0, 0}, knobs{-1, 0, 1, 0, 1, 20000, 1, 0, 0}, knobs{3, 0, 2, 64, 1, 4096, 2, 0, 0},
					knobs{-1, 0, 0, 0, 0, 0, 0, 0, 1}, knobs{-1, 0, 0, 0, 0, 0, 0, 0, 2}, knobs{-1, 0, 0, 0, 0, 0, 0, 0, -1}, knobs{1, 0, 2, 0, 0, 4096, 2, 0, 3})
				if m == AMXINT4 || m == INT4KGroup {
					configs = append(configs, knobs{-1, 0, 0, 0, 0, 0, 0, 2, 0}, knobs{1, 0, 2, 32, 0, 0, 0, 3, 0}, knobs{-1, 0, 1, 0, 1, 0, 0, 2, 0},
						knobs{-1, 0, 0, 0, 0, 4096, 0, 2, 0}, knobs{3, 0, 2, 64, 0, 20000, 2, 2, 0}, knobs{-1, 0, 0, 0, 0, 0, 0, 2, 3})
				}
			}
			for _, c := range configs {
				name := fmt.Sprintf("%s/%s/kblock=%d/down=%d/prefetch=%d/chunk=%d/pftiles=%d/slab=%d/group=%d/i4=%d/t1=%d", isa, m, c.kb, c.kbDown, c.pf, c.chunk, 1+c.pft, c.slab, c.grp, c.i4, c.t1)
				run, err := forwardOnce(withISA(Config{Threads: 3, MaxTokens: tokens, TopK: topK, AMXSlabBytes: c.slab, AMXSlabGroup: c.grp, AMXInt4Block: c.i4, AMXTileT1: c.t1,
					AMXKBlock: c.kb, AMXKBlockDown: c.kbDown, AMXPrefetch: c.pf, PrefillChunk: c.chunk, AMXPrefetchTiles: 1 + c.pft,
					Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate}, isa), spec, src,
					Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				out, ph := run.out, run.phases
				if ph.Phased != 1 || ph.Fused != 0 || ph.Seconds[2] <= 0 {
					t.Fatalf("%s: phase timers: %+v, want one phased task", name, ph)
				}
				if ref == nil {
					ref = out
					continue
				}
				for j := range ref {
					if math.Float32bits(ref[j]) != math.Float32bits(out[j]) {
						t.Fatalf("%s: out[%d] = %g, whole K gives %g", name, j, out[j], ref[j])
					}
				}
			}
		}
	}
}

// TestTileLayout checks the tile-order activation layout against the AMX
// kernels' tile addressing on any CPU (the kernels themselves need AMX).
func TestTileLayout(t *testing.T) {
	for _, c := range [][2]int{{1, 64}, {32, 64}, {45, 1024}, {100, 1536}, {7, 4096}, {64, 4096}} {
		if !tileLayoutOK(c[0], c[1]) {
			t.Errorf("%d rows of %d bytes: tile addressing does not read back the stored rows", c[0], c[1])
		}
	}
}
