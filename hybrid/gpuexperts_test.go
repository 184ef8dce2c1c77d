package hybrid

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/moe/placement"
	"github.com/ktserve/kt/tensor"
	"github.com/ktserve/kt/tp"
)

func TestCountPicks(t *testing.T) {
	counts := make([]int, 4)
	CountPicks(counts, []int32{0, 3, 3, -1, 4, 2, 3, 0})
	if want := []int{2, 0, 1, 3}; !slices.Equal(counts, want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
}

func TestHottestExperts(t *testing.T) {
	for _, c := range []struct {
		name   string
		counts []int
		n      int
		want   []int
	}{
		{"plain", []int{5, 1, 9, 3}, 2, []int{0, 2}},
		{"ties to the lower id", []int{2, 7, 2, 2, 7}, 3, []int{0, 1, 4}},
		{"all equal", []int{1, 1, 1, 1}, 2, []int{0, 1}},
		{"zeros fill by id", []int{0, 0, 4, 0}, 3, []int{0, 1, 2}},
		{"none", []int{3, 2}, 0, nil},
		{"all", []int{3, 2, 9}, 3, []int{0, 1, 2}},
		{"more than experts", []int{3, 2}, 5, []int{0, 1}},
		{"negative n", []int{3, 2}, -1, nil},
		{"sorted by id, not by count", []int{1, 2, 3, 4, 5, 6}, 3, []int{3, 4, 5}},
	} {
		got := HottestExperts(c.counts, c.n)
		if len(got) != len(c.want) || (len(got) > 0 && !slices.Equal(got, c.want)) {
			t.Errorf("%s: HottestExperts(%v, %d) = %v, want %v", c.name, c.counts, c.n, got, c.want)
		}
	}
}

func TestAssignSlots(t *testing.T) {
	for _, c := range []struct {
		name        string
		slots, want []int
		next        []int
		copies      []SlotCopy
		err         bool
	}{
		{"unchanged", []int{0, 1, 2}, []int{0, 1, 2}, []int{0, 1, 2}, nil, false},
		{"one new", []int{0, 1, 2}, []int{1, 2, 5}, []int{5, 1, 2}, []SlotCopy{{0, 5}}, false},
		{"all new", []int{0, 1}, []int{6, 7}, []int{6, 7}, []SlotCopy{{0, 6}, {1, 7}}, false},
		{"kept in place, freed slots filled lowest first", []int{3, 9, 4, 8}, []int{2, 4, 8, 11}, []int{2, 11, 4, 8}, []SlotCopy{{0, 2}, {1, 11}}, false},
		{"empty slots", []int{-1, -1}, []int{3, 1}, []int{3, 1}, []SlotCopy{{0, 3}, {1, 1}}, false},
		{"fewer wanted", []int{0, 1, 2}, []int{2}, []int{-1, -1, 2}, nil, false},
		{"too many", []int{0}, []int{1, 2}, nil, nil, true},
		{"twice", []int{0, 1}, []int{3, 3}, nil, nil, true},
		{"negative", []int{0, 1}, []int{-1, 3}, nil, nil, true},
	} {
		next, copies, err := AssignSlots(c.slots, c.want)
		if (err != nil) != c.err {
			t.Errorf("%s: error %v, want error %v", c.name, err, c.err)
			continue
		}
		if c.err {
			continue
		}
		if !slices.Equal(next, c.next) || !slices.Equal(copies, c.copies) {
			t.Errorf("%s: AssignSlots(%v, %v) = %v %v, want %v %v", c.name, c.slots, c.want, next, copies, c.next, c.copies)
		}
	}
}

func TestMaskAndSlots(t *testing.T) {
	mask := []bool{false, true, false, true, true}
	slots := SlotsFromMask(mask)
	if !slices.Equal(slots, []int{1, 3, 4}) {
		t.Fatalf("SlotsFromMask: %v", slots)
	}
	next, _, err := AssignSlots(slots, HottestExperts([]int{9, 0, 0, 7, 1}, 3))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]bool, len(mask))
	MaskFromSlots(got, next)
	if want := []bool{true, false, false, true, true}; !slices.Equal(got, want) {
		t.Errorf("mask after the update %v, want %v (slots %v)", got, want, next)
	}
	n := 0
	for _, on := range got {
		if on {
			n++
		}
	}
	if n != len(slots) {
		t.Errorf("%d experts on the GPU after the update, want %d (the count per layer is unchanged)", n, len(slots))
	}
}

// fakeT is a device tensor stand-in with a name.
type fakeT string

func (fakeT) DType() tensor.DType { return tensor.BF16 }
func (fakeT) Shape() []int        { return []int{1, 1} }

func TestRebindSlots(t *testing.T) {
	const E = 5
	host := func(e int, p string) backend.Host {
		return backend.Host{Name: p + string(rune('0'+e)), DType: tensor.BF16, Shape: []int{1, 1}, Data: make([]byte, 2)}
	}
	w := &Weights{Experts: backend.Experts{Gate: make([]backend.Tensor, E), Up: make([]backend.Tensor, E), Down: make([]backend.Tensor, E)},
		HostGate: make([]backend.Host, E), HostUp: make([]backend.Host, E), HostDown: make([]backend.Host, E),
		GPU: []bool{true, true, false, false, false}, NGPU: 2,
		OnGPU: backend.Experts{Gate: make([]backend.Tensor, E), Up: make([]backend.Tensor, E), Down: make([]backend.Tensor, E)}}
	slotT := [][3]backend.Tensor{{fakeT("g0"), fakeT("u0"), fakeT("d0")}, {fakeT("g1"), fakeT("u1"), fakeT("d1")}}
	for e := range E {
		w.HostGate[e], w.HostUp[e], w.HostDown[e] = host(e, "g"), host(e, "u"), host(e, "d")
		w.Gate[e], w.Up[e], w.Down[e] = hostTensor{w.HostGate[e]}, hostTensor{w.HostUp[e]}, hostTensor{w.HostDown[e]}
	}
	for i, e := range []int{0, 1} {
		w.OnGPU.Gate[e], w.OnGPU.Up[e], w.OnGPU.Down[e] = slotT[i][0], slotT[i][1], slotT[i][2]
		w.Gate[e], w.Up[e], w.Down[e] = slotT[i][0], slotT[i][1], slotT[i][2]
	}
	mask := w.GPU
	// experts 4 and 1 are the hottest: 1 stays in slot 1, 4 takes slot 0
	next, copies, err := AssignSlots([]int{0, 1}, HottestExperts([]int{1, 5, 0, 2, 9}, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(next, []int{4, 1}) || !slices.Equal(copies, []SlotCopy{{0, 4}}) {
		t.Fatalf("AssignSlots: %v %v", next, copies)
	}
	gpu := make([]bool, E)
	MaskFromSlots(gpu, next)
	RebindSlots(w, slotT, next, gpu, true)
	if want := []bool{false, true, false, false, true}; !slices.Equal(w.GPU, want) || &mask[0] != &w.GPU[0] {
		t.Errorf("mask %v, want %v, updated in place", w.GPU, want)
	}
	for e := range E {
		var want backend.Tensor
		switch e {
		case 4:
			want = fakeT("g0")
		case 1:
			want = fakeT("g1")
		}
		if w.OnGPU.Gate[e] != want {
			t.Errorf("OnGPU.Gate[%d] = %v, want %v", e, w.OnGPU.Gate[e], want)
		}
		if want != nil && w.Gate[e] != want {
			t.Errorf("Gate[%d] = %v, want the slot tensor %v", e, w.Gate[e], want)
		}
		if h, ok := w.Down[e].(hostTensor); want == nil && (!ok || h.h.Name != w.HostDown[e].Name) {
			t.Errorf("Down[%d] = %v, want the host stand-in of %s", e, w.Down[e], w.HostDown[e].Name)
		}
	}
}

// TestRebindSlotsRank rebinds the slots of one rank of two after a
// dynamic update: the layer's GPU experts are every rank's, the slots
// and OnGPU this rank's share, and a rank without the CPU expert engine
// binds no host stand-in.
func TestRebindSlotsRank(t *testing.T) {
	const E = 6
	w := &Weights{Experts: backend.Experts{Gate: make([]backend.Tensor, E), Up: make([]backend.Tensor, E), Down: make([]backend.Tensor, E)},
		HostGate: make([]backend.Host, E), HostUp: make([]backend.Host, E), HostDown: make([]backend.Host, E),
		GPU: []bool{true, true, true, true, false, false}, NGPU: 4,
		OnGPU: backend.Experts{Gate: make([]backend.Tensor, E), Up: make([]backend.Tensor, E), Down: make([]backend.Tensor, E)}}
	// rank 1 of 2 holds experts 2 and 3 in its slots
	slotT := [][3]backend.Tensor{{fakeT("g0"), fakeT("u0"), fakeT("d0")}, {fakeT("g1"), fakeT("u1"), fakeT("d1")}}
	for i, e := range []int{2, 3} {
		w.OnGPU.Gate[e], w.OnGPU.Up[e], w.OnGPU.Down[e] = slotT[i][0], slotT[i][1], slotT[i][2]
		w.Gate[e], w.Up[e], w.Down[e] = slotT[i][0], slotT[i][1], slotT[i][2]
	}
	// the new GPU experts 0, 3, 4, 5: rank 1's share is 4 and 5
	gpu := []bool{true, false, false, true, true, true}
	share := SlotsFromMask(RankShare(gpu, 1, 2))
	next, copies, err := AssignSlots([]int{2, 3}, share)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(next, []int{4, 5}) || len(copies) != 2 {
		t.Fatalf("AssignSlots: %v %v", next, copies)
	}
	RebindSlots(w, slotT, next, gpu, false)
	if !slices.Equal(w.GPU, gpu) {
		t.Errorf("mask %v, want the layer's GPU experts %v", w.GPU, gpu)
	}
	for e := range E {
		var want backend.Tensor
		switch e {
		case 4:
			want = fakeT("g0")
		case 5:
			want = fakeT("g1")
		}
		if w.OnGPU.Gate[e] != want || w.Gate[e] != want {
			t.Errorf("expert %d: OnGPU.Gate %v, Gate %v, want %v", e, w.OnGPU.Gate[e], w.Gate[e], want)
		}
	}
}

func TestRankShare(t *testing.T) {
	mask := func(s string) []bool {
		m := make([]bool, len(s))
		for i, c := range s {
			m[i] = c == '1'
		}
		return m
	}
	for _, c := range []struct {
		name string
		mask string
		size int
		want []string // per rank
	}{
		{"one rank holds all", "01101", 1, []string{"01101"}},
		{"even", "11110000", 2, []string{"11000000", "00110000"}},
		{"the first ranks one more", "0111011", 2, []string{"0111000", "0000011"}},
		{"fewer than ranks", "10010", 4, []string{"10000", "00010", "00000", "00000"}},
		{"none", "0000", 2, []string{"0000", "0000"}},
		{"all", "111111", 4, []string{"110000", "001100", "000010", "000001"}},
	} {
		cover := make([]int, len(c.mask))
		for r, want := range c.want {
			got := RankShare(mask(c.mask), r, c.size)
			if !slices.Equal(got, mask(want)) {
				t.Errorf("%s: rank %d of %d: share %v, want %s", c.name, r, c.size, got, want)
			}
			for e, on := range got {
				if on {
					cover[e]++
				}
			}
		}
		for e, n := range cover {
			if want := map[bool]int{true: 1, false: 0}[c.mask[e] == '1']; n != want {
				t.Errorf("%s: expert %d in %d shares, want %d", c.name, e, n, want)
			}
		}
	}
}

// TestPlanLayerwise checks which ranks compute which MoE layers, and
// whether their outputs are summed or rank 0's broadcast, over a dense
// layer 0, a MoE layer 1 with device experts and a MoE layer 2 without,
// with and without layerwise prefill (threshold 16) under tensor
// parallelism: a layerwise step (16 rows or more) has every rank compute
// its share of every MoE layer, and sums them.
func TestPlanLayerwise(t *testing.T) {
	moe := []bool{false, true, true}
	mask := placement.Mask{nil, {true, true, false, false}, {false, false, false, false}}
	for _, c := range []struct {
		rank, size, lw, n int
		runs, reduced     [3]bool // per layer
		onRank            [3]bool
	}{
		{rank: 0, size: 1, lw: 0, n: 32, runs: [3]bool{true, true, true}, onRank: [3]bool{true, true, true}},
		{rank: 0, size: 2, lw: 0, n: 32, runs: [3]bool{true, true, true}, reduced: [3]bool{false, true, false}, onRank: [3]bool{true, true, true}},
		{rank: 1, size: 2, lw: 0, n: 32, runs: [3]bool{false, true, false}, reduced: [3]bool{false, true, false}, onRank: [3]bool{false, true, false}},
		{rank: 1, size: 2, lw: 16, n: 8, runs: [3]bool{false, true, false}, reduced: [3]bool{false, true, false}, onRank: [3]bool{false, true, true}},
		{rank: 1, size: 2, lw: 16, n: 16, runs: [3]bool{false, true, true}, reduced: [3]bool{false, true, true}, onRank: [3]bool{false, true, true}},
		{rank: 0, size: 2, lw: 16, n: 16, runs: [3]bool{true, true, true}, reduced: [3]bool{false, true, true}, onRank: [3]bool{true, true, true}},
	} {
		t.Run(fmt.Sprintf("rank=%d,size=%d,lw=%d,n=%d", c.rank, c.size, c.lw, c.n), func(t *testing.T) {
			p := &Plan{mask: mask, moe: moe, lay: tp.Layout{Rank: c.rank, Size: c.size}, lw: c.lw, rb: &runbase.Base{}}
			for l := 1; l < 3; l++ {
				if got := p.Runs(l, c.n); got != c.runs[l] {
					t.Errorf("layer %d: Runs %v, want %v", l, got, c.runs[l])
				}
				if got := p.Reduced(l, c.n); got != c.reduced[l] {
					t.Errorf("layer %d: Reduced %v, want %v", l, got, c.reduced[l])
				}
				if got := p.OnRank(l); got != c.onRank[l] {
					t.Errorf("layer %d: OnRank %v, want %v", l, got, c.onRank[l])
				}
			}
			if p.Reduced(0, c.n) {
				t.Error("dense layer 0: Reduced")
			}
		})
	}
}
