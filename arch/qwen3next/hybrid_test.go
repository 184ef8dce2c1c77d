//go:build linux && amd64 && cgo

package qwen3next

import (
	"math"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/moe/placement"
)

// openTestGPU opens the GPU backend the hybrid tests share (a fifth of the
// memory), closed when the test ends, or skips the test without a GPU.
func openTestGPU(t *testing.T) *cuda.Backend {
	t.Helper()
	gpu, err := cuda.NewBackend(cuda.Options{MemFractionStatic: 0.2})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	t.Cleanup(func() { gpu.Close() })
	return gpu
}

// greedyLogprobs returns the logprob rows of prompt and of steps greedy
// decode steps after it (slot 0).
func greedyLogprobs(t *testing.T, tr modeltest.Runner, prompt []int32, steps int) [][]float64 {
	t.Helper()
	lps := modeltest.LogSoftmaxRows(modeltest.Forward(t, tr, 0, prompt, true))
	for range steps {
		last := lps[len(lps)-1]
		next := 0
		for v := range last {
			if last[v] > last[next] {
				next = v
			}
		}
		row := modeltest.Forward(t, tr, 0, []int32{int32(next)}, false)
		lps = append(lps, modeltest.LogSoftmax(row[0]))
	}
	return lps
}

// hybridTol bounds |logprob(hybrid) - logprob(all on the CPU)|: the GPU's
// ops (split-bf16 GEMMs, other summation orders) differ from the CPU
// backend's by up to ~5e-3 on the fixtures; the
// routed experts are the same engine either way.
const hybridTol = 5e-3

// TestHybridMatchesCPU runs a synthetic Qwen3.5 model (hidden 128, so the
// CPU expert engine serves it) with the routed experts on the CPU expert
// engine and everything else on the GPU, with 0, some and all routed
// experts on the GPU, and compares every logprob of a 40-token prompt and
// 6 decode steps against the same model wholly on the CPU (routed experts
// on the same engine) and against the model wholly on the GPU. The hybrid
// runs' decode steps are captured and replayed as piecewise CUDA graphs
// (one graph per stretch between MoE hand-offs, the CPU experts on the
// calling thread between launches); the stats are asserted. It skips
// without a GPU.
func TestHybridMatchesCPU(t *testing.T) {
	gpu := openTestGPU(t)
	dir, shape := writeEngineSynth(t, 3)
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i * 37 % shape.Vocab)
	}
	// run returns the prompt's logprob rows, then the greedy decode's.
	run := func(name string, be backend.Backend, experts string, want string, gpuExperts ...placement.Request) [][]float64 {
		t.Helper()
		o := arch.Options{Backend: be, MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts}
		if len(gpuExperts) > 0 {
			o.GPUExperts = gpuExperts[0]
		}
		r, err := Load(dir, o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer r.Close()
		modeltest.RequireExpertPath(t, name, r.ExpertPath(), want)
		lps := greedyLogprobs(t, testRunner{r}, prompt, 6)
		// on the GPU the 6 decode steps run through the graph path (the
		// first op by op, the second captured, all from the second on
		// replayed)
		st, _ := arch.GraphStatsOf(r)
		t.Logf("%s: decode graphs: %s", name, st)
		if be != nil && (st.Off != "" || st.Failed != "" || st.Captures != 1 || st.Replays != 5) {
			t.Fatalf("%s: graph stats %s; want 1 capture and 5 replays", name, st)
		}
		return lps
	}
	cpuRef := run("cpu", nil, "BF16", "cpuexperts BF16")
	gpuAll := run("gpu", gpu, "backend", "backend MoE op")
	hyb := run("hybrid", gpu, "BF16", "no routed expert on the GPU")
	// GPU experts (placement): none, some (uniform 3 per layer, seeded
	// random 40%), all; the GPU computes those with its MoE op, the CPU
	// engine the rest, the two shares summed on the GPU
	gpu0 := run("hybrid, 0 GPU experts", gpu, "BF16", "no routed expert on the GPU", placement.Request{PerLayer: 0})
	gpu3 := run("hybrid, 3 GPU experts per layer", gpu, "BF16", "GPU experts per MoE layer 3,3,3,3 (12 of 32)", placement.Request{PerLayer: 3})
	gpuRand := run("hybrid, random 40% on the GPU", gpu, "BF16", "(12 of 32)", placement.Request{Ratio: 0.4, RatioSet: true, Strategy: placement.Random})
	gpuFront := run("hybrid, front-loading 10 on the GPU", gpu, "BF16", "GPU experts per MoE layer 8,2,0,0 (10 of 32)",
		placement.Request{Ratio: 10.0 / 32, RatioSet: true, Strategy: placement.FrontLoading})
	gpu8 := run("hybrid, all experts on the GPU", gpu, "BF16", "GPU experts per MoE layer 8,8,8,8 (32 of 32)", placement.Request{PerLayer: 8})
	var spread float64
	for _, row := range cpuRef {
		for v := range row {
			spread = math.Max(spread, math.Abs(row[v]-row[0]))
		}
	}
	if spread < 0.5 {
		t.Fatalf("synthetic model too flat to compare (spread %g)", spread)
	}
	for _, c := range []struct {
		name      string
		got, want [][]float64
	}{
		{"hybrid vs cpu", hyb, cpuRef},
		{"hybrid vs gpu", hyb, gpuAll},
		{"gpu vs cpu", gpuAll, cpuRef},
		{"hybrid 0 GPU experts vs cpu", gpu0, cpuRef},
		{"hybrid 3 GPU experts/layer vs cpu", gpu3, cpuRef},
		{"hybrid random 40% GPU vs cpu", gpuRand, cpuRef},
		{"hybrid front-loading 10 GPU vs cpu", gpuFront, cpuRef},
		{"hybrid all GPU experts vs cpu", gpu8, cpuRef},
		{"hybrid all GPU experts vs gpu", gpu8, gpuAll},
	} {
		var worst float64
		for i := range c.want {
			for v := range c.want[i] {
				worst = math.Max(worst, math.Abs(c.got[i][v]-c.want[i][v]))
			}
		}
		t.Logf("%s: worst logprob difference %.3g over %d rows (spread %.3g)", c.name, worst, len(c.want), spread)
		if worst > hybridTol {
			t.Errorf("%s: logprobs differ by %g", c.name, worst)
		}
	}
}
