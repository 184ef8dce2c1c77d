package cpuexperts

import (
	"fmt"
	"math"
	"testing"
)

// TestPrefetch checks what a prefetch task reads and that it changes no
// result: for every method and one or two pools, the bytes it plans are the
// listed experts' own (ExpertBytes; bad ids, repeats and skipped experts
// left out), all of them are read when nothing is queued behind, and a
// forward task queued right behind one (which stops it) gives the same bits
// as without.
func TestPrefetch(t *testing.T) {
	const tokens, topK = 3, 4
	srcs := sourceCache{}
	for _, pools := range []int{1, 2} {
		for _, m := range Methods {
			t.Run(fmt.Sprintf("pools%d/%s", pools, m), func(t *testing.T) {
				spec := small
				spec.Method = m
				e := newEngine(t, spec, pools, 2*pools, tokens, topK, ISAAuto)
				l, err := e.NewLayer(spec, srcs.get(m, spec))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				skip := make([]bool, spec.Experts)
				skip[1] = true
				if err := l.SetSkip(skip); err != nil {
					t.Fatal(err)
				}
				l.Prefetch([]int32{5, -1, 5, int32(spec.Experts + 2), 1, 2, 0, 2})
				if err := e.Sync(); err != nil {
					t.Fatal(err)
				}
				planned, read := e.Prefetched()
				want := l.ExpertBytes(5) + l.ExpertBytes(2) + l.ExpertBytes(0)
				if planned != want || read != want {
					t.Fatalf("experts 5, 2, 0: planned %d bytes, read %d; want %d (ExpertBytes)", planned, read, want)
				}
				l.Prefetch(nil)
				l.Prefetch([]int32{1, -3})
				if p, r := e.Prefetched(); p != planned || r != read {
					t.Fatalf("nothing to read: planned %d, read %d bytes more", p-planned, r-read)
				}

				x, ids, w := RandomBatch(3, tokens, topK, spec.Hidden, spec.Experts)
				base := make([]float32, tokens*spec.Hidden)
				if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: base}); err != nil {
					t.Fatal(err)
				}
				all := make([]int32, spec.Experts)
				for i := range all {
					all[i] = int32(i)
				}
				for rep := 0; rep < 3; rep++ {
					out := make([]float32, tokens*spec.Hidden)
					l.Prefetch(all)
					if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
						t.Fatal(err)
					}
					for i := range out {
						if math.Float32bits(out[i]) != math.Float32bits(base[i]) {
							t.Fatalf("rep %d: out[%d] = %g after a prefetch, %g without", rep, i, out[i], base[i])
						}
					}
				}
				p2, r2 := e.Prefetched()
				if p2-planned != 3*(l.WeightBytes()-l.ExpertBytes(1)) || r2-read > p2-planned {
					t.Errorf("three prefetches of every expert but the skipped one: planned %d bytes, read %d; want %d planned", p2-planned, r2-read, 3*(l.WeightBytes()-l.ExpertBytes(1)))
				}
			})
		}
	}
}
