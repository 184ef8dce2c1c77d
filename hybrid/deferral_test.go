package hybrid

import (
	"slices"
	"testing"
)

func TestSplitDeferred(t *testing.T) {
	const E = 8
	for _, tc := range []struct {
		name     string
		ids      []int32
		wts      []float32
		n, k, d  int
		imm, def []int32
	}{
		{"one token, defer 1 of 2: the lower weight",
			[]int32{5, 2}, []float32{0.3, 0.7}, 1, 2, 1,
			[]int32{-1, 2}, []int32{5, -1}},
		{"one token, defer 2 of 4",
			[]int32{0, 1, 2, 3}, []float32{0.1, 0.4, 0.2, 0.3}, 1, 4, 2,
			[]int32{-1, 1, -1, 3}, []int32{0, -1, 2, -1}},
		{"D = k defers everything",
			[]int32{4, 6}, []float32{0.5, 0.5}, 1, 2, 2,
			[]int32{-1, -1}, []int32{4, 6}},
		{"D > k is D = k",
			[]int32{4, 6}, []float32{0.5, 0.5}, 1, 2, 9,
			[]int32{-1, -1}, []int32{4, 6}},
		{"ties: the earlier pick is protected",
			[]int32{3, 1, 7}, []float32{0.25, 0.5, 0.25}, 1, 3, 1,
			[]int32{3, 1, -1}, []int32{-1, -1, 7}},
		// token 0 protects 5, token 1 protects 2; token 1's 5 and token 0's
		// 2 are then immediate too (the batch-wide OR); 3 and 6 are
		// deferred
		{"batch-wide OR of the protected experts",
			[]int32{5, 2, 3, 2, 5, 6}, []float32{0.6, 0.3, 0.1, 0.7, 0.2, 0.1}, 2, 3, 2,
			[]int32{5, 2, -1, 2, 5, -1}, []int32{-1, -1, 3, -1, -1, 6}},
		{"ids outside [0, E) go nowhere",
			[]int32{-1, 3, 9, 4}, []float32{0.9, 0.1, 0.9, 0.1}, 2, 2, 1,
			[]int32{-1, -1, -1, -1}, []int32{-1, 3, -1, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			imm, def := make([]int32, tc.n*tc.k), make([]int32, tc.n*tc.k)
			SplitDeferred(tc.ids, tc.wts, tc.n, tc.k, tc.d, E, imm, def, make([]bool, E))
			if !slices.Equal(imm, tc.imm) || !slices.Equal(def, tc.def) {
				t.Errorf("immediate %v deferred %v, want %v %v", imm, def, tc.imm, tc.def)
			}
			// every valid pick lands in exactly one task
			for i, id := range tc.ids {
				if id < 0 || id >= E {
					continue
				}
				if (imm[i] == id) == (def[i] == id) {
					t.Errorf("pick %d (expert %d): immediate %d deferred %d", i, id, imm[i], def[i])
				}
			}
		})
	}
}

func TestDeferralPlan(t *testing.T) {
	T, F := true, false
	for _, tc := range []struct {
		name     string
		moe, cpu []bool
		d, k     int
		want     []int
	}{
		{"off", []bool{T, T, T}, []bool{T, T, T}, 0, 2, []int{0, 0, 0}},
		{"the last MoE layer never defers", []bool{T, T, T}, []bool{T, T, T}, 1, 2, []int{1, 1, 0}},
		{"one MoE layer: nothing to defer to", []bool{T}, []bool{T}, 2, 4, []int{0}},
		{"D above k is k", []bool{T, T}, []bool{T, T}, 5, 2, []int{2, 0}},
		{"dense layers in between: into the next MoE layer", []bool{F, T, F, T, F}, []bool{F, T, F, T, F}, 2, 4, []int{0, 2, 0, 0, 0}},
		{"a layer wholly on the GPU defers nothing, nor the one before", []bool{T, T, T, T}, []bool{T, T, F, T}, 1, 2, []int{1, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DeferralPlan(tc.moe, tc.cpu, tc.d, tc.k); !slices.Equal(got, tc.want) {
				t.Errorf("plan %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSplitDeferredDoesNotAllocate(t *testing.T) {
	ids, wts := []int32{1, 2, 3, 4, 5, 6, 7, 0}, []float32{8, 7, 6, 5, 4, 3, 2, 1}
	imm, def, flag := make([]int32, 8), make([]int32, 8), make([]bool, 8)
	if a := testing.AllocsPerRun(10, func() { SplitDeferred(ids, wts, 1, 8, 4, 8, imm, def, flag) }); a != 0 {
		t.Errorf("%v allocations per split", a)
	}
}
