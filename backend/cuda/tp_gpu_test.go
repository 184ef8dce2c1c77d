//go:build cgo

package cuda_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	testfixtures "github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/model"
)

// tpTol is the logprob tolerance of a tensor-parallel model against the
// same model on one rank (the row-parallel products summed in another
// order).
const tpTol = 1e-4

// TestTensorParallelSameDevice runs fixtures over 2 or 4 ranks that share
// one GPU (cuda.SameDeviceGroup through arch.LoadRanks: each rank its own
// backend and stream, the collectives as kernels) and checks the logprobs
// of every prompt's next tokens and of 4 greedy steps against the model on
// one rank on the same GPU, within tpTol, with the same greedy tokens.
func TestTensorParallelSameDevice(t *testing.T) {
	d := gpu(t)
	for _, c := range []struct {
		fixture string
		ranks   int
	}{
		{"qwen3moe-a", 2}, {"qwen3moe-b", 4}, {"qwen3moe-fp8-b", 2}, {"qwen3moe-trained", 4},
		{"qwen3next-b", 2}, {"qwen35moe-b", 4}, {"qwen35moe-fp8", 2},
	} {
		for _, graphs := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/tp=%d/graphs=%v", c.fixture, c.ranks, graphs), func(t *testing.T) {
				tensorParallelSameDevice(t, d, c.fixture, c.ranks, graphs)
			})
		}
	}
}

// tensorParallelSameDevice is one case of TestTensorParallelSameDevice;
// with graphs, every rank must have captured its decode steps (the
// collectives recorded in its graphs) and replayed them.
func tensorParallelSameDevice(t *testing.T, d *cuda.Device, fixture string, ranks int, graphs bool) {
	one := load(t, fixture, true)
	bes := make([]*cuda.Backend, ranks)
	abes := make([]backend.Backend, ranks)
	for r := range bes {
		b, err := cuda.NewBackendOn(d)
		if err != nil {
			t.Fatal(err)
		}
		bes[r], abes[r] = b, b
	}
	g, err := cuda.NewSameDeviceGroup(bes)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := arch.LoadRanks(fixtureDir(fixture), arch.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, DisableCUDAGraph: !graphs}, abes, g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rr.Close() })
	par := &runner{r: rr, pos: map[int]int{}}
	worst := 0.0
	check := func(what string, got, want []float32, tok int32) {
		g, w := logSoftmax(got), logSoftmax(want)
		d := math.Abs(g[tok] - w[tok])
		worst = math.Max(worst, d)
		if !(d <= tpTol) {
			t.Fatalf("%s: token %d logprob %.7f over %d ranks, %.7f on one", what, tok, g[tok], ranks, w[tok])
		}
	}
	for _, cs := range testfixtures.Load(t, fixture) {
		one.free(0)
		par.free(0)
		a, b := one.forward(t, 0, cs.PromptIDs, true), par.forward(t, 0, cs.PromptIDs, true)
		for i := 0; i+1 < len(cs.PromptIDs); i++ {
			check(fmt.Sprintf("%s prompt row %d", cs.Name, i), b[i], a[i], cs.PromptIDs[i+1])
		}
		la, lb := a[len(a)-1], b[len(b)-1]
		for s := 0; s < 4; s++ {
			ga, gb := argmax(logSoftmax(la)), argmax(logSoftmax(lb))
			if ga != gb {
				t.Fatalf("%s: greedy step %d: %d over %d ranks, %d on one", cs.Name, s, gb, ranks, ga)
			}
			check(fmt.Sprintf("%s greedy step %d", cs.Name, s), lb, la, ga)
			la, lb = one.forward(t, 0, []int32{ga}, false)[0], par.forward(t, 0, []int32{ga}, false)[0]
		}
	}
	t.Logf("worst logprob difference to one rank %.3g", worst)
	checkRankGraphs(t, rr, ranks, graphs)
}

// checkRankGraphs checks that with graphs every rank of rr captured its
// decode steps without a failure and replayed them, and without them none
// did.
func checkRankGraphs(t *testing.T, rr model.Runner, ranks int, graphs bool) {
	t.Helper()
	rk, ok := model.As[interface{ Rank(int) model.Runner }](rr)
	if !ok {
		t.Fatal("a tensor-parallel runner without its ranks")
	}
	for r := range ranks {
		st, _ := arch.GraphStatsOf(rk.Rank(r))
		t.Logf("rank %d: graphs %s", r, st)
		if graphs && (st.Captures == 0 || st.Replays == 0 || st.Failed != "") {
			t.Fatalf("rank %d: decode graphs %s, want captured and replayed", r, st)
		}
		if !graphs && st.Captures != 0 {
			t.Fatalf("rank %d: %d captures with graphs off", r, st.Captures)
		}
	}
}
