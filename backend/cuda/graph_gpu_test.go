//go:build cgo

package cuda_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend/cuda"
	testfixtures "github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/internal/stepper"
	"github.com/ktserve/kt/model"
)

// loadGraphMode loads fixture on the GPU with the decode graph path in
// mode: "on" (captured and replayed), "eager" (Options.EagerGraphSteps:
// the same padded steps op by op) or "off".
func loadGraphMode(t *testing.T, name, mode string) model.Runner {
	t.Helper()
	g, err := cuda.NewBackendOn(gpu(t))
	if err != nil {
		t.Fatal(err)
	}
	r, err := arch.Load(fixtureDir(name), arch.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, Backend: g,
		EagerGraphSteps: mode == "eager", DisableCUDAGraph: mode == "off"})
	if err != nil {
		g.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); g.Close() })
	return r
}

// TestModelGraphDecode runs prompts on 4 slots, then greedy decode steps of
// 1, 2, 3 (padded to 4) and 4 sequences, then 70 more steps of 4 sequences
// (contexts cross KV pages and a 64-token delta-rule chunk while the graph
// is replayed), then a mixed step and more decode steps, on three GPU
// runners: graphs on, the same padded steps op by op, graphs off. Graph
// replays must equal the op-by-op padded steps bit for bit; against
// unpadded steps (graphs off) they must be bit-identical where the batch is
// a bucket until the first padded step, and within modelTol after it
// (padding changed the GEMMs' row count, so their rounding).
func TestModelGraphDecode(t *testing.T) {
	for _, fx := range []string{"qwen3moe-a", "qwen3next-b", "qwen35moe-a", "qwen35moe-b", "deepseekv3-a"} {
		t.Run(fx, func(t *testing.T) {
			on, eager, off := loadGraphMode(t, fx, "on"), loadGraphMode(t, fx, "eager"), loadGraphMode(t, fx, "off")
			cases := testfixtures.Load(t, fx)
			sp := stepper.New(on, eager, off)
			var padDiff float64
			steps, padded := 0, false
			step := func(what string, slots []int, prompt map[int][]int32) {
				t.Helper()
				b, rows := sp.Run(t, what, slots, prompt)
				identical := func(a, b [][]float32) bool {
					for i := range a {
						for j := range a[i] {
							if a[i][j] != b[i][j] {
								return false
							}
						}
					}
					return true
				}
				if !identical(rows[0], rows[1]) {
					t.Fatalf("%s: graph replay differs from the same padded step op by op (worst logprob %.3g)", what, maxLogprobDiff(rows[0], rows[1]))
				}
				// once a step was padded, its GEMMs ran with more rows than
				// the unpadded runner's, which rounds differently, and the
				// caches written then differ in the last bits
				padded = padded || (prompt == nil && len(slots) == 3)
				if d := maxLogprobDiff(rows[0], rows[2]); !padded && !identical(rows[0], rows[2]) {
					t.Fatalf("%s: graph replay differs from the unpadded op-by-op step (worst logprob %.3g)", what, d)
				} else if d > modelTol {
					t.Fatalf("%s: padded step differs from the unpadded one by %.3g", what, d)
				} else {
					padDiff = math.Max(padDiff, d)
				}
				sp.Advance(b, rows[2])
				steps++
			}
			for s := 0; s < 4; s++ {
				p := cases[s%len(cases)].PromptIDs
				step(fmt.Sprintf("prefill slot %d", s), []int{s}, map[int][]int32{s: p[:min(len(p), 20+s)]})
			}
			for _, bs := range []int{1, 2, 3, 4} {
				for i := 0; i < 3; i++ {
					step(fmt.Sprintf("decode %d sequences, step %d", bs, i), []int{0, 1, 2, 3}[:bs], nil)
				}
			}
			for i := 0; i < 70; i++ {
				step(fmt.Sprintf("long decode step %d", i), []int{0, 1, 2, 3}, nil)
			}
			sp.Free(3)
			step("mixed step", []int{0, 3}, map[int][]int32{3: cases[0].PromptIDs[:7]})
			for i := 0; i < 3; i++ {
				step(fmt.Sprintf("decode after the mixed step %d", i), []int{0, 1, 2, 3}, nil)
			}
			st, _ := arch.GraphStatsOf(on)
			if st.Off != "" || st.Failed != "" || st.Captures < 3 || st.Replays < 70 {
				t.Fatalf("graph stats: %s; want at least 3 captures and 70 replays", st)
			}
			t.Logf("RESULT %s decode graph: %d steps, %s; replays bit-identical to op-by-op padded steps; padded (3 of 4) vs unpadded worst logprob %.3g",
				fx, steps, st, padDiff)
		})
	}
}
