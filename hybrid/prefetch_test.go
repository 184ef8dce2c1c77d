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
