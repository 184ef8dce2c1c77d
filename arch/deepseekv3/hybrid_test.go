//go:build linux && amd64 && cgo

package deepseekv3

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
	"github.com/ktserve/kt/moe/expertdist"
	"github.com/ktserve/kt/moe/placement"
)

// hybridTol bounds |logprob(GPU or hybrid) - logprob(all on the CPU)|: the
// GPU's ops (split-bf16 GEMMs, other summation orders) differ from the CPU
// backend's by up to ~5e-3 on the fixtures; the routed experts are the
// same engine either way.
const hybridTol = 5e-3

// openTestGPU opens the GPU the hybrid tests share (a fifth of the memory),
// closed when the test ends, or skips the test without a GPU.
func openTestGPU(t *testing.T) *cuda.Device {
	t.Helper()
	dev, err := cuda.Open(cuda.Options{MemFractionStatic: 0.2})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// loadOn loads the model in dir with o (one sequence of up to 64 tokens, 2
// threads) on a backend of dev (onGPU) or on the CPU, and returns it with
// the function that closes it (and the backend).
func loadOn(t *testing.T, dev *cuda.Device, onGPU bool, name, dir string, o arch.Options) (*Runner, func()) {
	t.Helper()
	o.MaxSeqs, o.MaxTotalTokens, o.MaxBatchTokens, o.Threads = 1, 64, 64, 2
	closeBackend := func() {}
	if onGPU {
		g, err := cuda.NewBackendOn(dev)
		if err != nil {
			t.Fatal(err)
		}
		closeBackend = func() { g.Close() }
		o.Backend = g
	}
	r, err := Load(dir, o)
	if err != nil {
		closeBackend()
		t.Fatalf("%s: %v", name, err)
	}
	return r, func() {
		r.Close()
		closeBackend()
	}
}

// greedyLogprobs returns the logprob rows of prompt and of steps greedy
// decode steps after it (slot 0).
func greedyLogprobs(t *testing.T, r testRunner, prompt []int32, steps int) [][]float64 {
	return decodeLogprobs(t, r, prompt, steps, nil)
}

// decodeLogprobs returns the logprob rows of prompt and of steps decode
// steps after it (slot 0), each step feeding next[i], or the greedy pick
// where next is nil.
func decodeLogprobs(t *testing.T, r testRunner, prompt []int32, steps int, next []int32) [][]float64 {
	t.Helper()
	lps := modeltest.LogSoftmaxRows(modeltest.Forward(t, r, 0, prompt, true))
	for i := range steps {
		tok := modeltest.Argmax(lps[len(lps)-1])
		if next != nil {
			tok = next[i]
		}
		row := modeltest.Forward(t, r, 0, []int32{tok}, false)
		lps = append(lps, modeltest.LogSoftmax(row[0]))
	}
	return lps
}

// TestHybridMatchesCPU runs synthetic DeepSeek-V3 models (a dense first
// layer, and every layer MoE: the first MoE layer's picks predicted at the
// step's start) wholly on the GPU (multi-head latent attention, the
// grouped router and the MoE op there), and in the hybrid step (routed
// experts on the CPU expert engine, everything else on the GPU) with no
// routed expert on the GPU, 3 per layer, a random 40 %, 10 front-loaded
// ones and the busiest by the CPU run's recorded picks, and with layerwise prefill (the 40-token prompt runs every routed
// expert on the GPU, layer by layer), and compares every logprob of a
// 40-token prompt (YaRN positions, several cache pages) and 6 greedy
// decode steps with the model wholly on the CPU: the hybrid runs with the
// CPU's run on the same engine, the GPU's with the CPU's run on the
// backend's MoE op (in f32, as on the GPU; against the engine's bf16
// activations a routing choice a hair apart may flip). On the GPU the
// decode steps run as CUDA graphs: the first op by op, the second
// captured, the rest replayed (in pieces between the MoE hand-offs in the
// hybrid step). It skips without a GPU.
func TestHybridMatchesCPU(t *testing.T) {
	dev := openTestGPU(t)
	prompt := make([]int32, 40)
	for _, dense := range []int{1, 0} {
		t.Run(fmt.Sprintf("dense layers %d", dense), func(t *testing.T) {
			shape := engineShape(dense)
			dir := t.TempDir()
			if err := WriteSynthetic(dir, shape, 11); err != nil {
				t.Fatal(err)
			}
			for i := range prompt {
				prompt[i] = int32(i * 37 % shape.Vocab)
			}
			// run loads the model with its routed experts on experts (and
			// the GPU experts, layerwise threshold and recorder of extra) and
			// returns the logprob rows; want is in its expert path.
			run := func(name string, onGPU bool, experts, want string, extra arch.Options) [][]float64 {
				t.Helper()
				o := arch.Options{Experts: experts, GPUExperts: extra.GPUExperts, GPUPrefillThreshold: extra.GPUPrefillThreshold,
					ExpertRecorder: extra.ExpertRecorder}
				r, done := loadOn(t, dev, onGPU, name, dir, o)
				defer done()
				modeltest.RequireExpertPath(t, name, r.ExpertPath(), want)
				lps := greedyLogprobs(t, testRunner{r}, prompt, 6)
				st, _ := arch.GraphStatsOf(r)
				t.Logf("%s: decode graphs: %s", name, st)
				if onGPU && (st.Off != "" || st.Failed != "" || st.Captures != 1 || st.Replays != 5) {
					t.Fatalf("%s: graph stats %s; want 1 capture and 5 replays", name, st)
				}
				return lps
			}
			// the CPU run records its picks: the frequency placement's
			// statistics
			rec, err := expertdist.New(shape.Layers, shape.Experts, -1, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			rec.Start()
			cpuRef := run("cpu", false, "BF16", "cpuexperts BF16", arch.Options{ExpertRecorder: rec})
			rec.Stop()
			stats, err := rec.Dump()
			if err != nil {
				t.Fatal(err)
			}
			cpuOp := run("cpu, reference op", false, "backend", "backend MoE op", arch.Options{})
			gpuAll := run("gpu", true, "backend", "backend MoE op", arch.Options{})
			hyb := run("hybrid", true, "BF16", "no routed expert on the GPU", arch.Options{})
			layerwise := run("hybrid, layerwise prefill from 16 tokens", true, "BF16", "layerwise prefill", arch.Options{GPUPrefillThreshold: 16})
			moe := shape.Layers - shape.DenseLayers
			all := shape.Experts * moe
			gpu3 := run("hybrid, 3 GPU experts per layer", true, "BF16", fmt.Sprintf("(%d of %d)", 3*moe, all), arch.Options{GPUExperts: placement.Request{PerLayer: 3}})
			gpuRand := run("hybrid, random 40% on the GPU", true, "BF16", fmt.Sprintf("(%d of %d)", all*2/5, all),
				arch.Options{GPUExperts: placement.Request{Ratio: 0.4, RatioSet: true, Strategy: placement.Random}})
			gpuFreq := run("hybrid, the 3 x MoE layers busiest on the GPU", true, "BF16", fmt.Sprintf("(%d of %d)", 3*moe, all),
				arch.Options{GPUExperts: placement.Request{PerLayer: 3, Strategy: placement.Frequency, StatsPath: stats}})
			gpuFront := run("hybrid, 10 front-loaded on the GPU", true, "BF16", fmt.Sprintf("(10 of %d)", all),
				arch.Options{GPUExperts: placement.Request{Ratio: 10 / float64(all), RatioSet: true, Strategy: placement.FrontLoading}})
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
				{"gpu vs cpu reference op", gpuAll, cpuOp},
				{"hybrid vs cpu", hyb, cpuRef},
				{"hybrid, layerwise prefill vs cpu", layerwise, cpuRef},
				{"hybrid 3 GPU experts/layer vs cpu", gpu3, cpuRef},
				{"hybrid random 40% vs cpu", gpuRand, cpuRef},
				{"hybrid frequency vs cpu", gpuFreq, cpuRef},
				{"hybrid front-loaded 10 vs cpu", gpuFront, cpuRef},
			} {
				worst := modeltest.WorstDiff(c.got, c.want)
				t.Logf("RESULT %s: worst logprob difference %.3g over %d rows (spread %.3g)", c.name, worst, len(c.want), spread)
				if worst > hybridTol {
					t.Errorf("%s: logprobs differ by %g", c.name, worst)
				}
			}
		})
	}
}

// TestHybridGraphDecode runs the hybrid step on a synthetic DeepSeek-V3
// model with 4 sequences: prompts, decode steps of 1, 2, 3 (padded to 4)
// and 4 sequences, 40 more steps of 4 (contexts cross latent-cache pages),
// a mixed step and more decode steps, on three hybrid runners: decode
// graphs on, the same padded steps op by op, graphs off. Graph replays
// (one piece per stretch between MoE hand-offs) must equal the op-by-op
// padded steps bit for bit; against unpadded steps they must stay within
// hybridTol. It skips without a GPU.
func TestHybridGraphDecode(t *testing.T) {
	dev := openTestGPU(t)
	shape := engineShape(1)
	dir := t.TempDir()
	if err := WriteSynthetic(dir, shape, 5); err != nil {
		t.Fatal(err)
	}
	load := func(mode string) model.Runner {
		g, err := cuda.NewBackendOn(dev) // one backend each: a graph keeps its backend's buffers
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		r, err := Load(dir, arch.Options{Backend: g, MaxSeqs: 4, MaxTotalTokens: 512, MaxBatchTokens: 64, Threads: 2, Experts: "BF16",
			EagerGraphSteps: mode == "eager", DisableCUDAGraph: mode == "off"})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		t.Cleanup(func() { r.Close() })
		if !strings.Contains(r.ExpertPath(), "hybrid") {
			t.Fatalf("%s: experts run on %q, want the hybrid step", mode, r.ExpertPath())
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
		modeltest.RequireIdentical(t, what+": graph replay vs the same padded step op by op", rows[0], rows[1])
		d := worstLogprob(rows[0], rows[2])
		if d > hybridTol {
			t.Fatalf("%s: graph step differs from the unpadded op-by-op step by %.3g", what, d)
		}
		padDiff = math.Max(padDiff, d)
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
	for i := 0; i < 40; i++ {
		step(fmt.Sprintf("long decode step %d", i), []int{0, 1, 2, 3}, nil)
	}
	sp.Free(3)
	step("mixed step", []int{0, 3}, map[int][]int32{3: prompt(7, 7)})
	for i := 0; i < 3; i++ {
		step(fmt.Sprintf("decode after the mixed step %d", i), []int{0, 1, 2, 3}, nil)
	}
	moe := shape.Layers - shape.DenseLayers
	st, _ := arch.GraphStatsOf(on)
	if st.Off != "" || st.Failed != "" || st.Captures < 3 || st.Replays < 40 || st.Segments != moe+1 {
		t.Fatalf("graph stats: %s (segments %d); want at least 3 captures and 40 replays, %d graphs per step", st, st.Segments, moe+1)
	}
	t.Logf("RESULT hybrid decode graph: %d steps, %s; replays bit-identical to op-by-op padded steps; vs unpadded worst logprob %.3g", steps, st, padDiff)
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

// TestHybridDeferral runs expert deferral in the hybrid step on the
// synthetic DeepSeek-V3 model with a dense first layer against the same
// deferral wholly on the CPU, op by op and as piecewise graphs
// (modeltest.HybridDeferral). It skips without a GPU.
func TestHybridDeferral(t *testing.T) {
	dev := openTestGPU(t)
	g, err := cuda.NewBackendOn(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dir, shape := t.TempDir(), engineShape(1)
	if err := WriteSynthetic(dir, shape, 12); err != nil {
		t.Fatal(err)
	}
	modeltest.HybridDeferral(t, g, shape.Vocab, shape.Layers-shape.DenseLayers, hybridTol, func(o arch.Options) (modeltest.EngineRunner, error) {
		r, err := Load(dir, o)
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}

// TestHybridPackedInt4 runs a synthetic DeepSeek-V3 model whose routed
// experts are compressed-tensors pack-quantized INT4 (groups of 32, as
// Kimi-K2-Thinking ships them) in the hybrid step on RAWINT4, with no
// routed expert on the GPU and with 3 per layer there (their bf16 values
// on the GPU's MoE op), and compares every logprob of a 40-token prompt
// and 6 decode steps with the same split on the CPU backend. It skips
// without a GPU.
func TestHybridPackedInt4(t *testing.T) {
	dev := openTestGPU(t)
	_, packedDir, _ := writePackedModel(t, 128) // RAWINT4 works on 128-column blocks
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i * 37 % engineShape(1).Vocab)
	}
	run := func(name string, onGPU bool, perLayer int) [][]float64 {
		t.Helper()
		r, done := loadOn(t, dev, onGPU, name, packedDir, arch.Options{Experts: "RAWINT4", GPUExperts: placement.Request{PerLayer: perLayer}})
		defer done()
		modeltest.RequireExpertPath(t, name, r.ExpertPath(), "cpuexperts RAWINT4")
		// fixed decode tokens: a greedy pick a hair apart would part the runs
		return decodeLogprobs(t, testRunner{r}, prompt, 6, []int32{5, 61, 200, 17, 99, 4})
	}
	// RAWINT4 quantizes its input rows to int8, and in the hybrid step those
	// rows come rounded to bf16: a few codes move by a step, beside the GPU's
	// own differences (hybridTol)
	const tol = 2e-2
	for _, n := range []int{0, 3} {
		name := fmt.Sprintf("%d GPU experts per layer", n)
		worst := modeltest.WorstDiff(run("hybrid, "+name, true, n), run("cpu, "+name, false, n))
		t.Logf("RESULT hybrid vs cpu, RAWINT4, %s: worst logprob difference %.3g", name, worst)
		if worst > tol {
			t.Errorf("hybrid vs cpu, RAWINT4, %s: logprobs differ by %g", name, worst)
		}
	}
}
