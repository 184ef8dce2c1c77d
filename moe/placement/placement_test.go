package placement

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// counts returns the per-layer GPU expert counts of m and checks each
// row's GPU experts are 0..c-1 when prefix is set.
func counts(t *testing.T, m Mask, prefix bool) []int {
	t.Helper()
	c := make([]int, len(m))
	for l := range m {
		c[l] = m.Count(l)
		if prefix {
			for e, g := range m[l] {
				if g != (e < c[l]) {
					t.Fatalf("layer %d: GPU experts are not 0..%d: %v", l, c[l]-1, m[l])
				}
			}
		}
	}
	return c
}

func eq(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCompute(t *testing.T) {
	all := []bool{true, true, true, true}
	dense0 := []bool{false, true, true, true, true} // layer 0 dense, as first_k_dense_replace=1
	for _, c := range []struct {
		name   string
		moe    []bool
		E      int
		r      Request
		want   []int
		total  int
		prefix bool
	}{
		{"unset", all, 8, Request{PerLayer: -1}, []int{0, 0, 0, 0}, 0, true},
		{"zero per layer", all, 8, Request{PerLayer: 0}, []int{0, 0, 0, 0}, 0, true},
		{"uniform per layer", all, 8, Request{PerLayer: 3}, []int{3, 3, 3, 3}, 12, true},
		{"uniform all", all, 8, Request{PerLayer: 8}, []int{8, 8, 8, 8}, 32, true},
		// ratio 0.3 of 32 = int(9.6) = 9: 9/4 = 2 each, first 9%4 = 1 layer +1
		{"uniform ratio remainder", all, 8, Request{PerLayer: 1, Ratio: 0.3, RatioSet: true}, []int{3, 2, 2, 2}, 9, true},
		{"ratio overrides per layer", all, 8, Request{PerLayer: 8, Ratio: 0, RatioSet: true}, []int{0, 0, 0, 0}, 0, true},
		{"ratio 1", all, 8, Request{Ratio: 1, RatioSet: true}, []int{8, 8, 8, 8}, 32, true},
		{"dense row all GPU", dense0, 8, Request{PerLayer: 2}, []int{8, 2, 2, 2, 2}, 8, true},
		// 11 of 4 MoE layers: 3,3,3,2 skipping the dense layer 0
		{"dense uniform remainder", dense0, 8, Request{Ratio: 11.0 / 32, RatioSet: true}, []int{8, 3, 3, 3, 2}, 11, true},
		{"front-loading", all, 8, Request{Ratio: 0.6, RatioSet: true, Strategy: FrontLoading}, []int{8, 8, 3, 0}, 19, true},
		{"front-loading per layer", all, 8, Request{PerLayer: 2, Strategy: FrontLoading}, []int{8, 0, 0, 0}, 8, true},
		{"front-loading dense", dense0, 4, Request{PerLayer: 3, Strategy: FrontLoading}, []int{4, 4, 4, 4, 0}, 12, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, total, err := Compute(c.moe, c.E, c.r)
			if err != nil {
				t.Fatal(err)
			}
			if got := counts(t, m, c.prefix); !eq(got, c.want) || total != c.total {
				t.Fatalf("counts %v total %d, want %v total %d", got, total, c.want, c.total)
			}
		})
	}
}

func TestRandom(t *testing.T) {
	moe := []bool{false, true, true, true}
	E, n := 16, 20
	m, total, err := Compute(moe, E, Request{Ratio: float64(n) / 48, RatioSet: true, Strategy: Random})
	if err != nil {
		t.Fatal(err)
	}
	if total != n {
		t.Fatalf("total %d, want %d", total, n)
	}
	// exactly the first n cells of the documented permutation over the MoE
	// layers' cells (MoE layer i, expert e) = i*E+e
	want := map[[2]int]bool{}
	for _, cell := range rand.New(rand.NewPCG(RandomSeed, 0)).Perm(3 * E)[:n] {
		want[[2]int{1 + cell/E, cell % E}] = true
	}
	got := 0
	for l := 1; l < 4; l++ {
		for e := 0; e < E; e++ {
			if m[l][e] != want[[2]int{l, e}] {
				t.Fatalf("layer %d expert %d: %v, want %v", l, e, m[l][e], !m[l][e])
			}
			if m[l][e] {
				got++
			}
		}
	}
	if got != n || m.Count(0) != E {
		t.Fatalf("%d GPU experts in MoE layers (want %d), dense row %d (want %d)", got, n, m.Count(0), E)
	}
	m2, _, _ := Compute(moe, E, Request{Ratio: float64(n) / 48, RatioSet: true, Strategy: Random})
	for l := range m {
		for e := range m[l] {
			if m[l][e] != m2[l][e] {
				t.Fatal("random placement differs between two calls")
			}
		}
	}
}

func TestComputeErrors(t *testing.T) {
	all := []bool{true, true}
	for _, c := range []struct {
		name string
		E    int
		r    Request
		want string
	}{
		{"per layer above E", 8, Request{PerLayer: 9}, "8 routed experts per MoE layer"},
		{"ratio above 1", 8, Request{Ratio: 1.5, RatioSet: true}, "[0, 1]"},
		{"negative ratio", 8, Request{Ratio: -0.1, RatioSet: true}, "[0, 1]"},
		{"frequency without stats", 8, Request{PerLayer: 2, Strategy: Frequency}, "--init-expert-location"},
		{"frequency, missing stats file", 8, Request{PerLayer: 2, Strategy: Frequency, StatsPath: "x.pt"}, "x.pt"},
		{"frequency, other experts", 8, Request{PerLayer: 2, Strategy: Frequency, StatsPath: statsFile("emu_stats.pt")}, "model has 2 layers of 8 experts"},
		{"frequency, no logical_count", 8, Request{PerLayer: 2, Strategy: Frequency, StatsPath: statsFile("emu_view.pt")}, "keys: [t]"},
		{"unknown strategy", 8, Request{PerLayer: 2, Strategy: "best"}, "unknown strategy"},
		{"no experts", 0, Request{PerLayer: 2}, "0 experts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Compute(all, c.E, c.r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

func TestActive(t *testing.T) {
	for _, c := range []struct {
		r    Request
		want bool
	}{
		{Request{PerLayer: -1}, false},
		{Request{PerLayer: 0}, false},
		{Request{PerLayer: 2}, true},
		{Request{PerLayer: 2, RatioSet: true}, false},
		{Request{PerLayer: -1, Ratio: 0.1, RatioSet: true}, true},
	} {
		if got := c.r.Active(); got != c.want {
			t.Errorf("%+v: Active %v, want %v", c.r, got, c.want)
		}
	}
}

// statsFile names a torch.save test file of internal/torchpt.
func statsFile(name string) string {
	return filepath.Join("..", "..", "internal", "torchpt", "testdata", name)
}

// TestFrequency places GPU experts from SGLang-style statistics files (a
// dict with logical_count [2, 3, 4] and a raw [1, 3, 4] tensor) and checks
// the mask against a brute-force ranking of the summed counts.
func TestFrequency(t *testing.T) {
	moe := []bool{true, false, true} // layer 1 is dense
	const E = 4
	for _, c := range []struct {
		file string
		buf  int
	}{{"emu_stats.pt", 2}, {"emu_raw.pt", 1}, {"real_stats.pt", 2}, {"real_raw.pt", 1}} {
		path := statsFile(c.file)
		if _, err := os.Stat(path); err != nil {
			continue // real_* only where torch.save wrote them
		}
		for _, r := range []Request{
			{PerLayer: 1, Strategy: Frequency, StatsPath: path},
			{PerLayer: 3, Strategy: Frequency, StatsPath: path},
			{Ratio: 0.5, RatioSet: true, Strategy: Frequency, StatsPath: path},
		} {
			m, n, err := Compute(moe, E, r)
			if err != nil {
				t.Fatalf("%s %+v: %v", c.file, r, err)
			}
			// the counts gen_torchpt.py wrote, summed over the buffer
			count := func(l, e int) int {
				s := 0
				for b := range c.buf {
					i := (b*3+l)*E + e
					s += (i*7 + 3) % 11
				}
				return s
			}
			type cell struct{ l, e, c int }
			var cells []cell
			for _, l := range []int{0, 2} {
				for e := range E {
					cells = append(cells, cell{l, e, count(l, e)})
				}
			}
			sort.SliceStable(cells, func(i, j int) bool { return cells[i].c > cells[j].c })
			want := map[[2]int]bool{}
			for _, x := range cells[:n] {
				want[[2]int{x.l, x.e}] = true
			}
			for l := range moe {
				for e := range E {
					if g := m[l][e]; g != (want[[2]int{l, e}] || !moe[l]) {
						t.Errorf("%s %+v: layer %d expert %d on GPU = %v", c.file, r, l, e, g)
					}
				}
			}
			if m.Count(0)+m.Count(2) != n {
				t.Errorf("%s %+v: %d GPU experts, total says %d", c.file, r, m.Count(0)+m.Count(2), n)
			}
		}
	}
}
