package backend

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// TestGatherCols gathers column ranges of FP8 and F32 weights, block
// aligned and not, and checks every value equals the source's (bit for
// bit) and which block the result keeps.
func TestGatherCols(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const o, k = 70, 100
	w := make([]float32, o*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	for _, tc := range []struct {
		block        [2]int
		first, count int
		keep         bool // keeps the source block
	}{
		{[2]int{32, 32}, 32, 32, true},
		{[2]int{32, 32}, 64, 36, true}, // to the last column: partial block
		{[2]int{32, 32}, 0, 50, false},
		{[2]int{32, 32}, 16, 16, false},
		{[2]int{128, 128}, 50, 50, false},
		{[2]int{5, 7}, 0, 100, true},
	} {
		h, deq, err := QuantizeFP8("w", w, o, k, tc.block)
		if err != nil {
			t.Fatal(err)
		}
		g, err := GatherCols(h, "w[cols]", tc.first, tc.count)
		if err != nil {
			t.Fatalf("block %v cols %d+%d: %v", tc.block, tc.first, tc.count, err)
		}
		if kept := g.Block == tc.block; kept != tc.keep {
			t.Errorf("block %v cols %d+%d: result block %v", tc.block, tc.first, tc.count, g.Block)
		}
		got := dequant(t, g)
		for r := 0; r < o; r++ {
			for c := 0; c < tc.count; c++ {
				if got[r*tc.count+c] != deq[r*k+tc.first+c] {
					t.Fatalf("block %v cols %d+%d: [%d,%d] = %g, want %g", tc.block, tc.first, tc.count, r, c, got[r*tc.count+c], deq[r*k+tc.first+c])
				}
			}
		}
		// the F32 form of the same values
		f := f32Host("w", deq, o, k)
		g, err = GatherCols(f, "w[cols]", tc.first, tc.count)
		if err != nil {
			t.Fatal(err)
		}
		got = dequant(t, g)
		for r := 0; r < o; r++ {
			for c := 0; c < tc.count; c++ {
				if got[r*tc.count+c] != deq[r*k+tc.first+c] {
					t.Fatalf("f32 cols %d+%d: [%d,%d] = %g, want %g", tc.first, tc.count, r, c, got[r*tc.count+c], deq[r*k+tc.first+c])
				}
			}
		}
	}
	h, _, _ := QuantizeFP8("w", w, o, k, [2]int{32, 32})
	for _, bad := range [][2]int{{-1, 3}, {0, 0}, {90, 11}} {
		if _, err := GatherCols(h, "w", bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "outside") {
			t.Errorf("columns %v: %v", bad, err)
		}
	}
}

// f32Host is an F32 [o, k] weight of values v.
func f32Host(name string, v []float32, o, k int) Host {
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
	}
	return Host{Name: name, DType: tensor.F32, Shape: []int{o, k}, Data: data}
}
