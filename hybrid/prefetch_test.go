//go:build linux && amd64 && cgo

package hybrid

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTopK checks the host's pick of a prediction's experts against a
// plain selection (largest first, ties to the lower index, NaN never):
// random logits with many ties, k from 1 to past the non-NaN count.
func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		e := 1 + rng.IntN(300)
		logits := make([]float32, e)
		for i := range logits {
			logits[i] = float32(rng.IntN(20)) // ties
			if rng.IntN(50) == 0 {
				logits[i] = float32(math.NaN())
			}
		}
		k := 1 + rng.IntN(min(e, 70)+2)
		got := make([]int32, k)
		topK(got, logits)
		want := make([]int32, 0, k)
		for len(want) < k {
			best := -1
			for i, v := range logits {
				if v == v && !slices.Contains(want, int32(i)) && (best < 0 || v > logits[best]) {
					best = i
				}
			}
			want = append(want, int32(best))
			if best < 0 {
				for len(want) < k {
					want = append(want, -1)
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: %d logits, k %d: got %v, want %v", trial, e, k, got, want)
		}
	}
}

// TestPredictorTake checks what a hand-off takes of the predictions queued
// since the last one: the first MoE layer's prediction at the step's start
// only at that layer's hand-off, the next layer's only for a layer after
// the hand-off's, and each at most once.
func TestPredictorTake(t *testing.T) {
	type want struct{ sn, next, nn int }
	tests := []struct {
		name   string
		p      *predictor
		takes  []int // hand-off layers, in order
		wanted []want
	}{
		{name: "prefetch off", takes: []int{0}, wanted: []want{{}}},
		{name: "nothing queued", p: &predictor{}, takes: []int{0}, wanted: []want{{}}},
		{name: "at start and next", p: &predictor{start: 0, startN: 1, next: 1, nextN: 1},
			takes: []int{0, 1}, wanted: []want{{1, 1, 1}, {0, 1, 0}}},
		{name: "at start only", p: &predictor{start: 0, startN: 1},
			takes: []int{0, 0}, wanted: []want{{1, 0, 0}, {}}},
		{name: "at start for another layer", p: &predictor{start: 0, startN: 1, next: 3, nextN: 1},
			takes: []int{2}, wanted: []want{{0, 3, 1}}},
		{name: "next too late", p: &predictor{next: 2, nextN: 1},
			takes: []int{2}, wanted: []want{{0, 2, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i, l := range tc.takes {
				var got want
				got.sn, got.next, got.nn = tc.p.take(l)
				if got != tc.wanted[i] {
					t.Fatalf("take %d (layer %d) = %+v, want %+v", i, l, got, tc.wanted[i])
				}
			}
		})
	}
}
