//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestSubmitRelease checks Batch.Release: once the engine has stored the
// release value, before the caller syncs, the task's outputs are complete
// (bitwise those of Forward on the same batch), on the one-token fused path,
// a fused batch and a phased one (two pools); tasks queued back to back
// store their values in order, and a task without Release leaves the word
// alone.
func TestSubmitRelease(t *testing.T) {
	const topK = 4
	spec := small
	spec.Method = AMXINT8
	for _, c := range []struct{ pools, tokens int }{{1, 1}, {1, 7}, {2, 7}} {
		t.Run(fmt.Sprintf("pools%d/tok%d", c.pools, c.tokens), func(t *testing.T) {
			e := newEngine(t, spec, c.pools, 2*c.pools, c.tokens, topK, ISAAuto)
			l, err := e.NewLayer(spec, sourceFor(spec.Method, spec))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			x, ids, w := RandomBatch(uint64(31+c.tokens), c.tokens, topK, spec.Hidden, spec.Experts)
			want := make([]float32, c.tokens*spec.Hidden)
			if err := l.Forward(&Batch{Tokens: c.tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: want}); err != nil {
				t.Fatal(err)
			}
			var flag uint32
			outs := make([][]float32, 3)
			for i := range outs {
				outs[i] = make([]float32, len(want))
				b := &Batch{Tokens: c.tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: outs[i]}
				if i < 2 { // the third task has no release word
					b.Release, b.ReleaseValue = &flag, uint32(10+i)
				}
				if err := l.Submit(b); err != nil {
					t.Fatal(err)
				}
			}
			for i, v := range []uint32{10, 11} {
				for t0 := time.Now(); atomic.LoadUint32(&flag)-v > 1<<31; { // cyclic: flag < v
					if time.Since(t0) > 10*time.Second {
						t.Fatalf("task %d: release word %d after 10 s, want %d", i, atomic.LoadUint32(&flag), v)
					}
				}
				if !slices.Equal(outs[i], want) { // before any Sync
					t.Errorf("task %d: outputs differ from Forward's when the release value %d was stored", i, v)
				}
			}
			if err := e.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := atomic.LoadUint32(&flag); got != 11 {
				t.Errorf("release word %d after the task without one, want 11", got)
			}
			if !slices.Equal(outs[2], want) {
				t.Error("the task without a release word: outputs differ from Forward's")
			}
		})
	}
}
