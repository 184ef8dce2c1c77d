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
		t.Run(fmt.Sprintf("%s/tp=%d", c.fixture, c.ranks), func(t *testing.T) {
			one := load(t, c.fixture, true)
			bes := make([]*cuda.Backend, c.ranks)
			abes := make([]backend.Backend, c.ranks)
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
			rr, err := arch.LoadRanks(fixtureDir(c.fixture), arch.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16}, abes, g)
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
					t.Fatalf("%s: token %d logprob %.7f over %d ranks, %.7f on one", what, tok, g[tok], c.ranks, w[tok])
				}
			}
			for _, cs := range testfixtures.Load(t, c.fixture) {
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
						t.Fatalf("%s: greedy step %d: %d over %d ranks, %d on one", cs.Name, s, gb, c.ranks, ga)
					}
					check(fmt.Sprintf("%s greedy step %d", cs.Name, s), lb, la, ga)
					la, lb = one.forward(t, 0, []int32{ga}, false)[0], par.forward(t, 0, []int32{ga}, false)[0]
				}
			}
			t.Logf("worst logprob difference to one rank %.3g", worst)
		})
	}
}
