package modeltest

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/moe/placement"
)

// TPTol is the logprob tolerance of a tensor-parallel model against the
// same model on one rank: the row-parallel products are summed over the
// ranks in another order than one product sums them.
const TPTol = 1e-4

// TPCase is one fixture at one tensor-parallel size: Refusal empty means it
// must load and match the model on one rank, else the load must fail with
// an error containing Refusal. Experts is Options.Experts of both loads
// ("" is "backend", the reference op), Device their Options.GPUExperts
// (device experts: on the CPU backend, the backend's MoE op computes them,
// split over the ranks), Deferral their Options.ExpertDeferral (rank 0
// defers; the deferred output joins the next MoE layer there).
//
// Dir, when set, is a checkpoint to load instead of the fixture's (a
// synthetic one, Fixture naming it), with Cases as its prompts (each run
// for as many greedy steps as it has GreedyIDs; the ids themselves are not
// read): the mixed batch needs three, the second of over 30 tokens and
// the third of at least 40, and chunked prefill takes the last.
type TPCase struct {
	Fixture  string
	Size     int
	Refusal  string
	Experts  string
	Device   placement.Request
	Deferral int
	Dir      string
	Cases    []Case
}

// tracked counts the tokens each slot holds, for the checks that read
// slot lengths (a tensor-parallel runner hides its ranks' pools).
type tracked struct {
	model.Runner
	lens map[int]int
}

func (r *tracked) SlotLen(slot int) int { return r.lens[slot] }

// Unwrap returns the runner tracked (model.As).
func (r *tracked) Unwrap() model.Runner { return r.Runner }

func (r *tracked) Forward(b *model.Batch, out *model.Logits) error {
	if err := r.Runner.Forward(b, out); err != nil {
		return err
	}
	for _, c := range b.Chunks {
		r.lens[c.Slot] += len(c.Tokens)
	}
	return nil
}

func (r *tracked) Free(slot int) {
	r.Runner.Free(slot)
	delete(r.lens, slot)
}

// loadTP loads tc's fixture through arch.Load on the CPU over size ranks
// (1: the whole model) with 4 slots, 2048 tokens, 512 tokens a step, pages
// of 16, 2 threads in all and the routed experts on experts and tc.Device
// with tc.Deferral.
func loadTP(t *testing.T, tc TPCase, size int, experts string) (*tracked, error) {
	t.Helper()
	dir := tc.Dir
	if dir == "" {
		dir = FixtureDir(tc.Fixture)
	}
	r, err := arch.Load(dir, arch.Options{Device: "cpu", Threads: 2, TensorParallel: size,
		MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, Experts: experts, GPUExperts: tc.Device,
		ExpertDeferral: tc.Deferral})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { r.Close() })
	return &tracked{Runner: r, lens: map[int]int{}}, nil
}

// TPMatchesSingle checks each case: a fixture over Size CPU ranks gives,
// on every reference prompt, each row's logprobs of the next prompt token
// and of the top 8 tokens within TPTol of the model on one rank, the same
// greedy tokens (where the top-2 margin
// exceeds TPTol) with their logprobs over the reference's continuation
// length and, with the backend's MoE op (the CPU expert engine's kernels
// are not bit-identical over batch sizes, on one rank either) and without
// deferral (which splits a step's picks batch-wide), chunked prefill
// bit-identical to one prefill and a mixed batch bit-identical to its
// sequences run alone; or, for a case with a Refusal, that the load fails
// saying why.
func TPMatchesSingle(t *testing.T, cases []TPCase) {
	t.Helper()
	for _, tc := range cases {
		experts := tc.Experts
		if experts == "" {
			experts = "backend"
		}
		name := fmt.Sprintf("%s/tp=%d/experts=%s", tc.Fixture, tc.Size, experts)
		if tc.Device.Active() {
			name += fmt.Sprintf("/device=%d,%.2g,%s", tc.Device.PerLayer, tc.Device.Ratio, tc.Device.Strategy)
		}
		if tc.Deferral > 0 {
			name += fmt.Sprintf("/deferral=%d", tc.Deferral)
		}
		t.Run(name, func(t *testing.T) {
			par, err := loadTP(t, tc, tc.Size, experts)
			if tc.Refusal != "" {
				if err == nil || !strings.Contains(err.Error(), tc.Refusal) {
					t.Fatalf("load: %v, want a refusal containing %q", err, tc.Refusal)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			one, err := loadTP(t, tc, 1, experts)
			if err != nil {
				t.Fatal(err)
			}
			cases := tc.Cases
			if tc.Dir == "" {
				cases = ReadRef(t, tc.Fixture)
			}
			worst := 0.0
			for _, c := range cases {
				one.Free(0)
				par.Free(0)
				a, b := Forward(t, one, 0, c.PromptIDs, true), Forward(t, par, 0, c.PromptIDs, true)
				worst = math.Max(worst, RowsClose(t, c.Name+" prompt", b, a, c.PromptIDs[1:]))
				la, lb := a[len(a)-1], b[len(b)-1]
				for s := range c.GreedyIDs {
					pa, pb := LogSoftmax(la), LogSoftmax(lb)
					ga, gb := Argmax(pa), Argmax(pb)
					if ga != gb && margin(pa) > TPTol {
						t.Fatalf("%s: greedy step %d: token %d over %d ranks, %d on one", c.Name, s, gb, tc.Size, ga)
					}
					worst = math.Max(worst, RowsClose(t, fmt.Sprintf("%s greedy step %d", c.Name, s), [][]float32{lb}, [][]float32{la}, []int32{ga}))
					la, lb = Forward(t, one, 0, []int32{ga}, false)[0], Forward(t, par, 0, []int32{ga}, false)[0]
				}
			}
			path := arch.ExpertPath(par)
			t.Logf("worst logprob difference to one rank %.3g (routed experts: %s)", worst, path)
			if tc.Deferral > 0 && !strings.Contains(path, "deferral") {
				t.Errorf("deferral %d: rank 0's routed experts (%s) do not defer", tc.Deferral, path)
			}
			if experts != "backend" || tc.Deferral > 0 {
				return
			}
			par.Free(0)
			ChunkedPrefillCases(t, par, tc.Fixture, cases, 0, []int{5, 17, 64})
			for s := range 4 {
				par.Free(s)
			}
			MixedBatchCases(t, par, tc.Fixture, cases)
		})
	}
}

// RowsClose fails unless, in each row i of got, the logprob of token
// ids[i] (the next prompt token or the greedy pick; rows past ids: none)
// and of want's top 8 tokens are within TPTol of want's; it returns the
// worst difference.
func RowsClose(t *testing.T, what string, got, want [][]float32, ids []int32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range want {
		g, w := LogSoftmax(got[i]), LogSoftmax(want[i])
		toks := topK(w, 8)
		if i < len(ids) {
			toks = append(toks, ids[i])
		}
		for _, j := range toks {
			d := math.Abs(g[j] - w[j])
			if !(d <= TPTol) {
				t.Fatalf("%s: row %d token %d logprob %.7f, %.7f on one rank", what, i, j, g[j], w[j])
			}
			worst = math.Max(worst, d)
		}
	}
	return worst
}

// topK returns the indices of the k largest logprobs of lp.
func topK(lp []float64, k int) []int32 {
	idx := make([]int32, len(lp))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return cmp.Compare(lp[b], lp[a]) })
	return idx[:min(k, len(idx))]
}

// margin is the gap between a row's two largest logprobs.
func margin(lp []float64) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range lp {
		if v > a {
			a, b = v, a
		} else if v > b {
			b = v
		}
	}
	return a - b
}
