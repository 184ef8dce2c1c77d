//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"
)

// TestFusedMatchesPhased checks that the barrier-free decode path gives
// bitwise the same output as the phased path (same kernels, same summation
// order), for every method and ISA level, f32 and bf16 output, plain and
// incremental, with experts below and above the prefill threshold; with
// the AMX kernels emulated too (amxEmuLevel), on CPUs without AMX.
func TestFusedMatchesPhased(t *testing.T) {
	const topK = 4
	tokenCounts := []int{1, 40} // 40 tokens x 4 over 16 experts: >= 8 per expert (prefill kernels)
	srcs := sourceCache{}
	for _, isa := range testLevels(t) {
		for _, m := range Methods {
			spec := small
			spec.Method = m
			src := srcs.get(m, spec)
			engines := map[bool]*Engine{}
			layers := map[bool]*Layer{}
			for _, fused := range []bool{false, true} {
				cfg := Config{Threads: 3, MaxTokens: 64, TopK: topK,
					Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate, fusedMaxSlots: -1}
				if fused {
					cfg.fusedMaxSlots = 0
				}
				if fused && isa == ISAAVX2 {
					cfg.Threads = 1 // longer down items (r4f) than with 3 threads
				}
				e, err := NewEngine(withISA(cfg, isa))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(e.Close)
				l, err := e.NewLayer(spec, src)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(l.Close)
				engines[fused], layers[fused] = e, l
			}
			for _, tokens := range tokenCounts {
				x, ids, w := RandomBatch(uint64(tokens)+3, tokens, topK, spec.Hidden, spec.Experts)
				ids[0] = -1                     // a skipped slot
				ids[len(ids)-1] = int32(ids[1]) // and a repeated expert
				prev := make([]float32, tokens*spec.Hidden)
				for i := range prev {
					prev[i] = float32(i%7) - 3
				}
				for _, mode := range [][2]bool{{false, false}, {true, true}} {
					incr, bf := mode[0], mode[1]
					{
						name := fmt.Sprintf("%s/%s/tok%d/incr=%v/bf16=%v", isa, m, tokens, incr, bf)
						var got [2][]float32
						for i, fused := range []bool{false, true} {
							b := &Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Incremental: incr}
							if bf {
								b.OutBF16 = make([]uint16, tokens*spec.Hidden)
								for j, v := range prev {
									b.OutBF16[j] = uint16(math.Float32bits(v) >> 16) // exact: small integers
								}
							} else {
								b.Out = append([]float32(nil), prev...)
							}
							if err := layers[fused].Forward(b); err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							if bf {
								got[i] = make([]float32, len(b.OutBF16))
								for j, v := range b.OutBF16 {
									got[i][j] = math.Float32frombits(uint32(v) << 16)
								}
							} else {
								got[i] = b.Out
							}
						}
						for j := range got[0] {
							if math.Float32bits(got[0][j]) != math.Float32bits(got[1][j]) {
								t.Fatalf("%s: out[%d]: phased %g, fused %g", name, j, got[0][j], got[1][j])
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkDecode times one Qwen3.5-35B-A3B-shaped layer at 1 and 4 tokens,
// fused and phased, on all cores (weights mostly in cache on a small
// machine: this measures the fixed cost per task, not bandwidth).
func BenchmarkDecode(b *testing.B) {
	spec := LayerSpec{Method: AMXINT4, Experts: 64, Hidden: 2048, Intermediate: 512}
	for _, m := range []Method{AMXINT4, AMXBF16} {
		spec.Method = m
		for _, fused := range []bool{false, true} {
			fm := -1
			if fused {
				fm = 0
			}
			e, err := NewEngine(Config{MaxTokens: 4, TopK: 8, Experts: spec.Experts, Hidden: spec.Hidden,
				Intermediate: spec.Intermediate, fusedMaxSlots: fm})
			if err != nil {
				b.Fatal(err)
			}
			l, err := e.NewLayer(spec, sourceFor(m, spec))
			if err != nil {
				b.Fatal(err)
			}
			for _, tokens := range []int{1, 4} {
				x, ids, w := RandomBatch(1, tokens, 8, spec.Hidden, spec.Experts)
				out := make([]uint16, tokens*spec.Hidden)
				xb := make([]uint16, len(x))
				for i, v := range x {
					xb[i] = uint16(math.Float32bits(v) >> 16)
				}
				batch := &Batch{Tokens: tokens, TopK: 8, XBF16: xb, IDs: ids, Weights: w, OutBF16: out}
				b.Run(fmt.Sprintf("%s/tok%d/fused=%v", m, tokens, fused), func(b *testing.B) {
					for b.Loop() {
						if err := l.Forward(batch); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			l.Close()
			e.Close()
		}
	}
}
