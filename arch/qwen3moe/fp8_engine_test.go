//go:build linux && amd64 && cgo

package qwen3moe

import (
	"math"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend/cpu"
)

// TestFP8CheckpointCPUExperts serves an FP8 checkpoint (128 x 128 blocks, a
// width the CPU expert engine takes) with its routed experts on the engine,
// as --kt-method does: a converting method gives the logits of the same
// model with the weights dequantized to F32 (within the float32 rounding of
// the non-expert FP8 MatMuls), and the in-place FP8 method those of the
// backend's MoE op over the same FP8 experts within the engine's bf16
// activations (the engine reads the experts with their block scales).
func TestFP8CheckpointCPUExperts(t *testing.T) {
	src := t.TempDir()
	shape := SynthShape{Layers: 2, Hidden: 128, Heads: 2, KVHeads: 1, HeadDim: 64, Experts: 4, TopK: 2, MoEInter: 128, Vocab: 256, Exp: 123}
	if err := WriteSynthetic(src, shape, 5); err != nil {
		t.Fatal(err)
	}
	fp8Dir, deqDir := writeFP8PairFrom(t, src, [2]int{128, 128})
	prompt := []int32{3, 17, 99, 4, 250, 31, 8, 77, 120, 5, 61, 200}
	run := func(dir, experts string) [][]float32 {
		t.Helper()
		be := cpu.New(cpu.Options{Threads: 2})
		defer be.Close()
		r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 128, MaxBatchTokens: 64, PageSize: 16, Backend: be, Experts: experts})
		if err != nil {
			t.Fatalf("%s with experts %s: %v", dir, experts, err)
		}
		defer r.Close()
		return modeltest.Forward(t, testRunner{r}, 0, prompt, true)
	}
	worst := func(a, b [][]float32) (w, scale float64) {
		for i := range a {
			for j := range a[i] {
				w = math.Max(w, math.Abs(float64(a[i][j]-b[i][j])))
				scale = math.Max(scale, math.Abs(float64(b[i][j])))
			}
		}
		return w, scale
	}
	for _, m := range []string{"AMXINT8", "AMXINT4", "AMXBF16"} {
		d, s := worst(run(fp8Dir, m), run(deqDir, m))
		t.Logf("%s: FP8 checkpoint against the dequantized one: max |logit diff| %.3g (logits up to %.3g)", m, d, s)
		if d > 1e-4*max(1, s) {
			t.Errorf("%s: FP8 checkpoint logits differ from the dequantized one's by %g", m, d)
		}
	}
	d, s := worst(run(fp8Dir, "FP8"), run(fp8Dir, "backend"))
	t.Logf("FP8 in place against the backend's MoE op: max |logit diff| %.3g (logits up to %.3g)", d, s)
	if d > 2e-2*max(s, 1e-3) {
		t.Errorf("FP8 in place differs from the backend's MoE op by %g (logits up to %g)", d, s)
	}
}
