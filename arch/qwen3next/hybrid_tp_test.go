//go:build linux && amd64 && cgo

package qwen3next

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/moe/placement"
)

// TestHybridTensorParallelSameDevice runs the hybrid step over 2 ranks
// that share one GPU (cuda.SameDeviceGroup through arch.LoadRanks): rank 0
// runs the CPU expert engine on the CPU experts, the GPU experts are split
// over the ranks (each computes its share on its backend), and the ranks'
// outputs are summed with the shared expert's shards. Every logprob of a
// prompt and of 6 greedy steps must be within modeltest.TPTol of the same
// hybrid model on one rank, with the same greedy tokens. It skips without
// a GPU.
func TestHybridTensorParallelSameDevice(t *testing.T) {
	gpu := openTestGPU(t)
	dir, shape := writeEngineSynth(t, 5)
	prompt := make([]int32, 24)
	for i := range prompt {
		prompt[i] = int32(i * 41 % shape.Vocab)
	}
	for _, dev := range []placement.Request{
		{PerLayer: 3}, // shares of 2 and 1 per layer
		{Ratio: 10.0 / 32, RatioSet: true, Strategy: placement.FrontLoading}, // a layer wholly on the GPUs, one split, two on the CPU
	} {
		t.Run(fmt.Sprintf("%d,%.2g,%s", dev.PerLayer, dev.Ratio, dev.Strategy), func(t *testing.T) {
			o := arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: "BF16", GPUExperts: dev}
			o1 := o
			o1.Backend = gpu
			one, err := Load(dir, o1)
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			bes := make([]*cuda.Backend, 2)
			abes := make([]backend.Backend, 2)
			for r := range bes {
				if bes[r], err = cuda.NewBackendOn(gpu.Device()); err != nil {
					t.Fatal(err)
				}
				abes[r] = bes[r]
			}
			g, err := cuda.NewSameDeviceGroup(bes)
			if err != nil {
				t.Fatal(err)
			}
			par, err := arch.LoadRanks(dir, o, abes, g)
			if err != nil {
				t.Fatal(err)
			}
			defer par.Close()
			path := arch.ExpertPath(par)
			t.Logf("one rank: %s; rank 0 of 2: %s", one.ExpertPath(), path)
			if !strings.Contains(path, "GPU experts per MoE layer") {
				t.Fatalf("rank 0's experts run on %q, want the hybrid step with GPU experts", path)
			}
			want := greedyLogprobs(t, testRunner{one}, prompt, 6)
			got := greedyLogprobs(t, &tpRunner{Runner: par}, prompt, 6)
			worst := 0.0
			for i := range want {
				if a, b := modeltest.Argmax(got[i]), modeltest.Argmax(want[i]); a != b {
					t.Fatalf("row %d: greedy token %d over 2 ranks, %d on one", i, a, b)
				}
				for v := range want[i] {
					worst = math.Max(worst, math.Abs(got[i][v]-want[i][v]))
				}
			}
			t.Logf("worst logprob difference to one rank %.3g over %d rows", worst, len(want))
			if worst > modeltest.TPTol {
				t.Errorf("logprobs differ by %g over 2 ranks", worst)
			}
		})
	}
}

// tpRunner is a tensor-parallel model.Runner that counts the tokens of
// its slot 0 (modeltest.Runner; a tensor-parallel runner hides its ranks'
// pools).
type tpRunner struct {
	model.Runner
	n int
}

func (r *tpRunner) SlotLen(int) int { return r.n }

func (r *tpRunner) Forward(b *model.Batch, out *model.Logits) error {
	if err := r.Runner.Forward(b, out); err != nil {
		return err
	}
	for _, c := range b.Chunks {
		r.n += len(c.Tokens)
	}
	return nil
}
