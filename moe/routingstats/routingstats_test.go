package routingstats

import (
	"math"
	"slices"
	"testing"

	"github.com/ktserve/kt/moe/placement"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestLayerSkew(t *testing.T) {
	for _, c := range []struct {
		name    string
		row     []int64
		want    Skew
		entropy float64
	}{
		{"uniform", []int64{5, 5, 5, 5, 5, 5, 5, 5, 5, 5}, Skew{Picks: 50, Top10: 0.1, Top10N: 1, Top25: 0.3, Top25N: 3}, 1},
		{"one expert", []int64{0, 0, 9, 0}, Skew{Picks: 9, Top10: 1, Top10N: 1, Top25: 1, Top25N: 1, Unused: 3}, 0},
		// 8 experts: top 10 % = 1, top 25 % = 2; picks 4,2,1,1 then 0s
		{"skewed", []int64{1, 0, 4, 0, 2, 0, 1, 0}, Skew{Picks: 8, Top10: 0.5, Top10N: 1, Top25: 0.75, Top25N: 2, Unused: 4},
			-(0.5*math.Log(0.5) + 0.25*math.Log(0.25) + 2*0.125*math.Log(0.125)) / math.Log(8)},
		{"no picks", []int64{0, 0, 0, 0}, Skew{Top10N: 1, Top25N: 1, Unused: 4}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := LayerSkew(c.row)
			e := got.Entropy
			got.Entropy = 0
			if !near(got.Top10, c.want.Top10) || !near(got.Top25, c.want.Top25) {
				t.Fatalf("shares %+v, want %+v", got, c.want)
			}
			got.Top10, got.Top25, c.want.Top10, c.want.Top25 = 0, 0, 0, 0
			if got != c.want || !near(e, c.entropy) {
				t.Fatalf("got %+v entropy %v, want %+v entropy %v", got, e, c.want, c.entropy)
			}
		})
	}
}

func TestRecorder(t *testing.T) {
	r, err := NewRecorder(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Recording() {
		t.Fatal("not recording")
	}
	r.Add(0, []int32{1, 1, 3, -1})
	r.Add(1, []int32{0, 4}) // 4 out of range
	r.Add(2, []int32{0})    // no such layer
	r.EndWindow()
	r.EndWindow() // an empty window is kept
	r.Add(1, []int32{2})
	r.EndWindow()
	ws := r.Windows()
	want := []Counts{{{0, 2, 0, 1}, {1, 0, 0, 0}}, {{0, 0, 0, 0}, {0, 0, 0, 0}}, {{0, 0, 0, 0}, {0, 0, 1, 0}}}
	if len(ws) != len(want) {
		t.Fatalf("%d windows, want %d", len(ws), len(want))
	}
	for i := range ws {
		for l := range ws[i] {
			if !slices.Equal(ws[i][l], want[i][l]) {
				t.Fatalf("window %d layer %d: %v, want %v", i, l, ws[i][l], want[i][l])
			}
		}
	}
	s := Sum(ws, 2, 4)
	if !slices.Equal(s[0], []int64{0, 2, 0, 1}) || !slices.Equal(s[1], []int64{1, 0, 1, 0}) || s.Total() != 5 {
		t.Fatalf("sum %v total %d", s, s.Total())
	}
	if _, err := NewRecorder(0, 4); err == nil {
		t.Fatal("0 layers accepted")
	}
}

func TestShare(t *testing.T) {
	c := Counts{{0, 0, 0}, {5, 1, 4}, {2, 2, 6}} // layer 0 dense
	for _, tc := range []struct {
		name     string
		m        placement.Mask
		gpu, all int64
	}{
		{"none", placement.Mask{{true, true, true}, {false, false, false}, {false, false, false}}, 0, 20},
		{"all", placement.Mask{{true, true, true}, {true, true, true}, {true, true, true}}, 20, 20},
		{"some", placement.Mask{{true, true, true}, {true, false, false}, {false, false, true}}, 11, 20},
		{"short mask", placement.Mask{{true, true, true}, {false, true, false}}, 1, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if g, a := Share(tc.m, c); g != tc.gpu || a != tc.all {
				t.Fatalf("share %d/%d, want %d/%d", g, a, tc.gpu, tc.all)
			}
		})
	}
}

func TestHottest(t *testing.T) {
	for _, c := range []struct {
		row  []int64
		n    int
		want []int
	}{
		{[]int64{1, 5, 3, 5}, 2, []int{1, 3}},
		{[]int64{1, 5, 3, 5}, 3, []int{1, 2, 3}},
		{[]int64{0, 0, 0, 0}, 2, []int{0, 1}}, // ties to the lower id
		{[]int64{2, 1}, 5, []int{0, 1}},
		{[]int64{2, 1}, -1, []int{}},
	} {
		if got := hottest(c.row, c.n); !slices.Equal(got, c.want) {
			t.Errorf("hottest(%v, %d) = %v, want %v", c.row, c.n, got, c.want)
		}
	}
}

func TestDynamic(t *testing.T) {
	// one dense layer (all GPU) and one MoE layer of 4 experts, 1 on the GPU
	initial := placement.Mask{{true, true, true, true}, {true, false, false, false}}
	ws := []Counts{
		{{0, 0, 0, 0}, {1, 2, 6, 1}}, // initial mask: expert 0 -> 1 of 10
		{{0, 0, 0, 0}, {0, 1, 7, 2}}, // expert 2 (hottest of window 0) -> 7 of 10
		{{0, 0, 0, 0}, {4, 0, 1, 0}}, // expert 2 again -> 1 of 5
	}
	if g, a := Dynamic(initial, ws); g != 9 || a != 25 {
		t.Fatalf("dynamic %d/%d, want 9/25", g, a)
	}
	if g, a := Dynamic(initial, nil); g != 0 || a != 0 {
		t.Fatalf("no windows: %d/%d", g, a)
	}
}

func TestBest(t *testing.T) {
	moe := []bool{false, true, true}
	c := Counts{{0, 0, 0}, {5, 1, 4}, {2, 2, 6}}
	m := Best(moe, c, 3)
	want := placement.Mask{{true, true, true}, {true, false, true}, {false, false, true}}
	for l := range want {
		if !slices.Equal(m[l], want[l]) {
			t.Fatalf("layer %d: %v, want %v", l, m[l], want[l])
		}
	}
	if g, a := Share(m, c); g != 15 || a != 20 {
		t.Fatalf("best share %d/%d", g, a)
	}
	// ties: layer 2's 2s, the lower expert first
	m = Best(moe, c, 4)
	if !m[2][0] || m[2][1] || m[1][1] {
		t.Fatalf("tie order: %v", m)
	}
}
