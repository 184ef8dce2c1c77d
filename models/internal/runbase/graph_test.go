package runbase

import (
	"slices"
	"testing"
)

func TestBuckets(t *testing.T) {
	for _, c := range []struct {
		max  int
		want []int
	}{
		{0, nil},
		{1, []int{1}},
		{2, []int{1, 2}},
		{3, []int{1, 2, 3}},
		{4, []int{1, 2, 4}},
		{6, []int{1, 2, 4, 6}},
		{8, []int{1, 2, 4, 8}},
		{20, []int{1, 2, 4, 8, 16, 20}},
		{32, []int{1, 2, 4, 8, 16, 24, 32}},
	} {
		if got := Buckets(c.max); !slices.Equal(got, c.want) {
			t.Errorf("Buckets(%d) = %v, want %v", c.max, got, c.want)
		}
		g := graphState{buckets: Buckets(c.max)}
		for n := 1; n <= c.max; n++ {
			if b := g.bucket(n); b < n || b > c.max || !slices.Contains(c.want, b) {
				t.Errorf("max %d: bucket(%d) = %d", c.max, n, b)
			}
		}
		if b := g.bucket(c.max + 1); b != 0 {
			t.Errorf("max %d: bucket(%d) = %d, want 0 (op by op)", c.max, c.max+1, b)
		}
	}
}
