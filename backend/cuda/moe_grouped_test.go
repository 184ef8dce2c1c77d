//go:build cgo

package cuda

import "testing"

// TestMoEGroupedSized checks from how many (token, expert) pairs the MoE
// op takes its grouped path: moeGroupedMinPairs by default, the count
// SetMoEGroupedMin gave, never below 0, and never past moe_align's expert
// limit or for rows off 16-byte boundaries.
func TestMoEGroupedSized(t *testing.T) {
	for _, c := range []struct {
		min, pairs, experts, hidden, inter int
		want                               bool
	}{
		{0, moeGroupedMinPairs - 1, 128, 2048, 768, false},
		{0, moeGroupedMinPairs, 128, 2048, 768, true},
		{1, 1, 128, 2048, 768, true},
		{-1, 1 << 20, 128, 2048, 768, false},
		{0, moeGroupedMinPairs, moeGroupMaxExperts + 1, 2048, 768, false},
		{0, moeGroupedMinPairs, 128, 2044, 768, false},
		{0, moeGroupedMinPairs, 128, 2048, 764, false},
	} {
		g := moeGrouped{minPairs: c.min}
		if got := g.sized(c.pairs, c.experts, c.hidden, c.inter); got != c.want {
			t.Errorf("min %d: sized(%d pairs, %d experts, %d, %d) = %v, want %v", c.min, c.pairs, c.experts, c.hidden, c.inter, got, c.want)
		}
	}
}
