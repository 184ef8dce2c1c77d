package vecmath

import (
	"math"
	"slices"
	"testing"
)

// rows returns test rows: lengths around the vector widths, large spreads
// (underflow to 0), NaN and ±Inf elements.
func rows() [][]float32 {
	var out [][]float32
	x := uint64(11)
	next := func() float32 {
		x = x*6364136223846793005 + 1442695040888963407
		return float32(x>>40) / float32(1<<24)
	}
	for _, n := range []int{64, 65, 71, 100, 127, 128, 129, 1000, 151936} {
		for _, spread := range []float32{1, 40, 300} {
			r := make([]float32, n)
			for i := range r {
				r[i] = (next() - 0.5) * spread
			}
			out = append(out, r)
		}
	}
	special := make([]float32, 200)
	for i := range special {
		special[i] = float32(i%13) - 6
	}
	special[3], special[150] = float32(math.NaN()), float32(math.Inf(-1))
	special[77] = 9
	return append(out, special)
}

// TestCMatchesGo: every C level the CPU has gives the Go loops' values
// (max exactly, e^(x-max) bit for bit, the sum within float64 reordering).
func TestCMatchesGo(t *testing.T) {
	ls := levels()
	if len(ls) == 0 {
		t.Skip("no C loops on this CPU or build")
	}
	for _, l := range ls {
		for i, r := range rows() {
			wantMax := maxGo(r)
			if got, ok := maxAt(l, r); !ok || got != wantMax {
				t.Fatalf("level %d row %d: max %v, Go %v", l, i, got, wantMax)
			}
			want := slices.Clone(r)
			ws := sumExpGo(want, wantMax, true)
			got := slices.Clone(r)
			gs, _ := sumExpAt(l, got, wantMax, true)
			for j := range want {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("level %d row %d [%d]: e^(%v-%v) = %v, Go %v", l, i, j, r[j], wantMax, got[j], want[j])
				}
			}
			ns, _ := sumExpAt(l, r, wantMax, false)
			for _, s := range []float64{gs, ns} {
				if math.Abs(s-ws) > 1e-12*math.Max(ws, 1) {
					t.Fatalf("level %d row %d: sum %v, Go %v", l, i, s, ws)
				}
			}
			if !slices.Equal(r, rows()[i]) && i < len(rows())-1 {
				t.Fatalf("level %d row %d: SumExpShifted wrote to its row", l, i)
			}
		}
	}
}

// TestScaleMaxAndBlocks: ScaleMax gives the Go loop's products bit for bit
// and their maximum; ExpShiftedBlocks gives ExpShifted's values bit for bit
// and block sums that add up to its sum (within float64 reordering), at
// every C level the CPU has and in Go, for block sizes that do and do not
// divide the row.
func TestScaleMaxAndBlocks(t *testing.T) {
	for _, l := range append(levels(), 0) {
		for i, r := range rows() {
			for _, s := range []float32{1, 1 / 0.7, 0.37} {
				want := slices.Clone(r)
				wm := scaleMaxGo(want, s)
				got := slices.Clone(r)
				gm, ok := scaleMaxAt(l, got, s)
				if !ok {
					gm = ScaleMax(got, s)
				}
				if gm != wm && !(math.IsNaN(float64(gm)) && math.IsNaN(float64(wm))) {
					t.Fatalf("level %d row %d scale %v: max %v, Go %v", l, i, s, gm, wm)
				}
				for j := range want {
					if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
						t.Fatalf("level %d row %d scale %v [%d]: %v, Go %v", l, i, s, j, got[j], want[j])
					}
				}
			}
			mx := maxGo(r)
			ref := slices.Clone(r)
			whole := sumExpGo(ref, mx, true)
			for _, bs := range []int{64, 100, 256} {
				got := slices.Clone(r)
				sums := make([]float64, Blocks(len(r), bs))
				total, ok := expBlocksAt(l, got, mx, bs, sums)
				if !ok {
					total = ExpShiftedBlocks(got, mx, bs, sums)
				}
				for j := range ref {
					if math.Float32bits(got[j]) != math.Float32bits(ref[j]) {
						t.Fatalf("level %d row %d block %d [%d]: e^ %v, ExpShifted %v", l, i, bs, j, got[j], ref[j])
					}
				}
				var add float64
				for k, sm := range sums {
					var want float64
					for _, v := range got[k*bs : min((k+1)*bs, len(got))] {
						want += float64(v)
					}
					if math.Abs(sm-want) > 1e-12*math.Max(want, 1) {
						t.Fatalf("level %d row %d block size %d: block %d sums to %v, want %v", l, i, bs, k, sm, want)
					}
					add += sm
				}
				if total != add || math.Abs(total-whole) > 1e-12*math.Max(whole, 1) {
					t.Fatalf("level %d row %d block size %d: total %v (blocks %v), ExpShifted %v", l, i, bs, total, add, whole)
				}
			}
		}
	}
}

// TestAbove: the indices at or above a threshold, at every C level and in
// Go, for thresholds inside, below and above each row's range (NaNs never).
func TestAbove(t *testing.T) {
	for _, l := range append(levels(), 0) {
		for i, r := range rows() {
			for _, thr := range []float32{-1e9, -3, 0, 0.4, 2.5, 1e9} {
				want := aboveGo(r, thr, nil)
				got, ok := aboveAt(l, r, thr, make([]int32, len(r)))
				if !ok {
					got = Above(r, thr, nil)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("level %d row %d thr %v: %d indices, Go %d", l, i, thr, len(got), len(want))
				}
			}
		}
	}
}

// TestExpAccuracy bounds the float32 exponential against math.Exp.
func TestExpAccuracy(t *testing.T) {
	worst := 0.0
	for x := float32(0); x > -87; x -= 0.0037 {
		rel := math.Abs(float64(exp32(x))-math.Exp(float64(x))) / math.Exp(float64(x))
		worst = math.Max(worst, rel)
	}
	if worst > 2.5e-7 {
		t.Errorf("worst relative error %g", worst)
	}
	for _, x := range []float32{-87.4, -1000, float32(math.Inf(-1)), float32(math.NaN())} {
		if exp32(x) != 0 {
			t.Errorf("exp32(%v) = %v, want 0", x, exp32(x))
		}
	}
	if exp32(0) != 1 {
		t.Errorf("exp32(0) = %v", exp32(0))
	}
}

func BenchmarkSumExpShifted(b *testing.B) {
	r := rows()[len(rows())-2]
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			sumExpGo(r, 150, false)
		}
	})
	b.Run(Level(), func(b *testing.B) {
		for b.Loop() {
			SumExpShifted(r, 150)
		}
	})
}
