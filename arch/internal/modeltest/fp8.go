package modeltest

import (
	"math"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// WriteFP8Pair writes two copies of the checkpoint in srcDir: fp8 with
// every 2-D *_proj weight block-scaled FP8 (blocks block,
// weight_scale_inv, config's quantization_config), and deq with those
// weights dequantised to F32 (the values the FP8 contract gives them).
func WriteFP8Pair(t *testing.T, srcDir string, block [2]int) (fp8Dir, deqDir string) {
	t.Helper()
	return writeQuantizedPair(t, srcDir, func(name string) bool { return strings.HasSuffix(name, "_proj.weight") },
		func(name string, w []float32, out, in int) ([]tensorEntry, []float32) {
			h, deq, err := backend.QuantizeFP8(name, w, out, in, block)
			if err != nil {
				t.Fatal(err)
			}
			return []tensorEntry{{safetensors.Spec{Name: name, DType: tensor.F8E4M3, Shape: []int64{int64(out), int64(in)}}, h.Data},
				{safetensors.Spec{Name: name + "_scale_inv", DType: tensor.F32, Shape: []int64{int64(h.Scale.Shape[0]), int64(h.Scale.Shape[1])}}, h.Scale.Data}}, deq
		},
		map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": block[:]})
}

// FP8CheckpointCPUExperts serves an FP8 copy of the checkpoint in src
// (128 x 128 blocks; widths the CPU expert engine takes) with its routed
// experts on the engine, as --kt-method does: a converting method
// (AMXINT8, AMXINT4, AMXBF16) gives the logits of the same model with the
// weights dequantized to F32 (within the float32 rounding of the
// non-expert FP8 MatMuls), and the in-place FP8 method those of the
// backend's MoE op over the same FP8 experts within the engine's bf16
// activations (the engine reads the experts with their block scales).
func FP8CheckpointCPUExperts(t *testing.T, src string, prompt []int32, load func(dir string, o arch.Options) (Runner, error)) {
	t.Helper()
	fp8Dir, deqDir := WriteFP8Pair(t, src, [2]int{128, 128})
	run := func(dir, experts string) [][]float32 {
		t.Helper()
		be := cpu.New(cpu.Options{Threads: 2})
		defer be.Close()
		r, err := load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 128, MaxBatchTokens: 64, PageSize: 16, Backend: be, Experts: experts})
		if err != nil {
			t.Fatalf("%s with experts %s: %v", dir, experts, err)
		}
		defer r.Close()
		return Forward(t, r, 0, prompt, true)
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
