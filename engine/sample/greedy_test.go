package sample

import (
	"math"
	"slices"
	"testing"
)

// TestGreedyPickMatchesArgmax checks the greedy path of a plain sequence,
// which reads the row uncopied, against argmax over the copy the other
// paths adjust, on rows with ties, NaNs, infinities and every entry -Inf.
func TestGreedyPickMatchesArgmax(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	long := make([]float32, 1000)
	for i := range long {
		long[i] = float32(math.Sin(float64(i)*0.37)) * 5
	}
	long[701], long[703] = 9, 9
	for _, c := range []struct {
		name string
		row  []float32
	}{
		{"single", []float32{0.5}},
		{"tie: first wins", []float32{1, 3, 2, 3}},
		{"NaN skipped", []float32{nan, 1, nan, 2, nan}},
		{"+Inf", []float32{1, inf, 2, inf}},
		{"-Inf entries", []float32{-inf, -1, -inf}},
		{"every entry -Inf", []float32{-inf, -inf}},
		{"every entry NaN", []float32{nan, nan}},
		{"long row with a late tie", long},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := argmax(slices.Clone(c.row))
			id, err := greedyPick(c.row)
			if (err != nil) != (want < 0) || (err == nil && id != want) {
				t.Fatalf("greedyPick = %d, %v; argmax = %d", id, err, want)
			}
		})
	}
}

func BenchmarkGreedyPick(b *testing.B) {
	row := make([]float32, 248320)
	for i := range row {
		row[i] = float32(math.Sin(float64(i)*0.001)) * 3
	}
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			greedyPick(row)
		}
	})
	b.Run("argmax", func(b *testing.B) {
		w := make([]float32, len(row))
		for b.Loop() {
			copy(w, row)
			argmax(w)
		}
	})
}
