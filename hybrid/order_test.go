package hybrid

import (
	"slices"
	"testing"
)

// TestOrder checks the first MoE layer and each layer's next one (order).
func TestOrder(t *testing.T) {
	w := &Weights{}
	for _, c := range []struct {
		name   string
		layers []*Weights
		first  int
		next   []int
	}{
		{"all MoE", []*Weights{w, w, w}, 0, []int{1, 2, -1}},
		{"dense first", []*Weights{nil, w, nil, w}, 1, []int{1, 3, 3, -1}},
		{"dense last", []*Weights{w, nil}, 0, []int{-1, -1}},
		{"no MoE", []*Weights{nil, nil}, -1, []int{-1, -1}},
		{"empty", nil, -1, []int{}},
	} {
		first, next := order(c.layers)
		if first != c.first || !slices.Equal(next, c.next) {
			t.Errorf("%s: Order = %d, %v; want %d, %v", c.name, first, next, c.first, c.next)
		}
	}
}
