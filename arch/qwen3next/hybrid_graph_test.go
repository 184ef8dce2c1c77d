//go:build linux && amd64 && cgo

package qwen3next

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/internal/stepper"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/moe/placement"
)

// TestHybridGraphDecode runs the hybrid step (routed experts on the CPU
// expert engine) on a synthetic Qwen3.5 model with 4 sequences: prompts,
// decode steps of 1, 2, 3 (padded to 4) and 4 sequences, 60 more steps of
// 4, a mixed step and more decode steps, on three hybrid runners: decode
// graphs on, the same padded steps op by op (Options.EagerGraphSteps: the
// op-by-op hand-off), graphs off. Graph replays must equal the op-by-op
// padded steps bit for bit (same GPU kernels on the same rows, the same
// engine task on the same f32 rows); against unpadded steps they must stay
// within hybridTol (padding changes the GPU GEMMs' row count). Decode
// steps run as piecewise graphs (one per stretch between MoE hand-offs, 5
// for the 4 MoE layers, the CPU experts on the calling thread between
// launches, the next piece launched ahead of their end and held by a
// kernel polling a pinned counter, which the path must say), with no GPU
// experts and with 3 of 8 per layer on the GPU (the GPU MoE op between
// the copies and the hand-off), and with expert deferral D = 1 (plain
// hand-offs: the deferred task runs on while the next piece does; padding
// rows take part in the batch-wide protection, so there it is not
// compared with unpadded steps). It skips without a GPU.
func TestHybridGraphDecode(t *testing.T) {
	dev, err := cuda.Open(cuda.Options{MemFractionStatic: 0.3})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer dev.Close()
	dir, shape := writeEngineSynth(t, 5)
	const ahead = "the next piece launched before the CPU experts end"
	for _, c := range []struct {
		name   string
		req    placement.Request
		defer1 bool
	}{
		{"no GPU experts", placement.Request{}, false},
		{"3 GPU experts per layer", placement.Request{PerLayer: 3}, false},
		{"D=1", placement.Request{}, true},
		{"D=1, 3 GPU experts per layer", placement.Request{PerLayer: 3}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := 0
			if c.defer1 {
				d = 1
			}
			load := func(mode string) model.Runner {
				gpu, err := cuda.NewBackendOn(dev) // one backend each: a graph keeps its backend's buffers
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { gpu.Close() })
				r, err := Load(dir, arch.Options{Backend: gpu, MaxSeqs: 4, MaxTotalTokens: 512, MaxBatchTokens: 64,
					Threads: 2, Experts: "BF16", GPUExperts: c.req, ExpertDeferral: d,
					EagerGraphSteps: mode == "eager", DisableCUDAGraph: mode == "off"})
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				t.Cleanup(func() { r.Close() })
				if !strings.Contains(r.ExpertPath(), "hybrid") {
					t.Fatalf("%s: experts run on %q, want the hybrid step", mode, r.ExpertPath())
				}
				if mode == "on" {
					t.Logf("experts: %s", r.ExpertPath())
					if got := strings.Contains(r.ExpertPath(), ahead); got != !c.defer1 {
						t.Fatalf("path %q: ahead hand-offs %v, want %v", r.ExpertPath(), got, !c.defer1)
					}
				}
				return r
			}
			on, eager, off := load("on"), load("eager"), load("off")
			sp := stepper.New(on, eager, off)
			var padDiff float64
			steps := 0
			step := func(what string, slots []int, prompt map[int][]int32) {
				t.Helper()
				b, rows := sp.Run(t, what, slots, prompt)
				for i := range rows[0] {
					for j := range rows[0][i] {
						if rows[0][i][j] != rows[1][i][j] {
							t.Fatalf("%s: graph replay differs from the same padded step op by op: row %d logit %d: %g vs %g (worst logprob %.3g)",
								what, i, j, rows[0][i][j], rows[1][i][j], worstLogprob(rows[0], rows[1]))
						}
					}
				}
				d := worstLogprob(rows[0], rows[2])
				if d > hybridTol && !c.defer1 {
					t.Fatalf("%s: graph step differs from the unpadded op-by-op step by %.3g", what, d)
				}
				padDiff = math.Max(padDiff, d)
				// teacher-force the padded runs' tokens: with deferral the
				// unpadded run may pick others
				sp.Advance(b, rows[1])
				steps++
			}
			prompt := func(s, n int) []int32 {
				p := make([]int32, n)
				for i := range p {
					p[i] = int32((i*37 + s*101 + 5) % shape.Vocab)
				}
				return p
			}
			for s := 0; s < 4; s++ {
				step(fmt.Sprintf("prefill slot %d", s), []int{s}, map[int][]int32{s: prompt(s, 12+3*s)})
			}
			for _, bs := range []int{1, 2, 3, 4} {
				for i := 0; i < 3; i++ {
					step(fmt.Sprintf("decode %d sequences, step %d", bs, i), []int{0, 1, 2, 3}[:bs], nil)
				}
			}
			for i := 0; i < 60; i++ {
				step(fmt.Sprintf("long decode step %d", i), []int{0, 1, 2, 3}, nil)
			}
			sp.Free(3)
			step("mixed step", []int{0, 3}, map[int][]int32{3: prompt(7, 7)})
			for i := 0; i < 5; i++ {
				step(fmt.Sprintf("decode after the mixed step %d", i), []int{0, 1, 2, 3}, nil)
			}
			st, _ := arch.GraphStatsOf(on)
			if st.Off != "" || st.Failed != "" || st.Captures < 3 || st.Replays < 60 || st.Segments != shape.Layers+1 {
				t.Fatalf("graph stats: %s (segments %d); want at least 3 captures and 60 replays, %d graphs per step", st, st.Segments, shape.Layers+1)
			}
			t.Logf("RESULT hybrid decode graph (%s): %d steps, %s; replays bit-identical to op-by-op padded hybrid steps; vs unpadded worst logprob %.3g",
				c.name, steps, st, padDiff)
		})
	}
}

// worstLogprob is the largest |logprob difference| between two sets of
// logits rows.
func worstLogprob(a, b [][]float32) float64 {
	var w float64
	for i := range a {
		la, lb := modeltest.LogSoftmax(a[i]), modeltest.LogSoftmax(b[i])
		for v := range la {
			w = math.Max(w, math.Abs(la[v]-lb[v]))
		}
	}
	return w
}
