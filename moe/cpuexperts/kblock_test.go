//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"
)

// TestAMXKBlockBitwise checks that the K blocking of the AMX prefill
// kernels does not change results: whole K, blocks of 1 tile step and of 3
// (which leaves a short last block) give bitwise equal outputs, with
// experts above KT_MCH tokens (several kernel calls per item). On CPUs
// without AMX the option is ignored and the check is trivially true.
// It also checks that the phase timers count the tasks.
func TestAMXKBlockBitwise(t *testing.T) {
	const topK, tokens = 4, 600 // ~150 tokens per expert
	for _, isa := range levels(t) {
		for _, m := range []Method{AMXBF16, AMXINT8, AMXINT4, BF16} {
			spec := small
			spec.Method = m
			src := sourceFor(m, spec)
			x, ids, w := RandomBatch(11, tokens, topK, spec.Hidden, spec.Experts)
			ids[5] = -1
			var ref []float32
			for _, kb := range []int{-1, 1, 3} {
				name := fmt.Sprintf("%s/%s/kblock=%d", isa, m, kb)
				e, err := NewEngine(Config{Threads: 3, ISA: isa, MaxTokens: tokens, TopK: topK, AMXKBlock: kb,
					Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate})
				if err != nil {
					t.Fatal(err)
				}
				l, err := e.NewLayer(spec, src)
				if err != nil {
					e.Close()
					t.Fatal(err)
				}
				out := make([]float32, tokens*spec.Hidden)
				err = l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out})
				ph := e.Phases()
				l.Close()
				e.Close()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
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
