package qwen3moe

import (
	"math"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend/cpu"
)

// writeFP8Pair writes the FP8 and dequantised copies of fixture src
// (modeltest.WriteFP8Pair).
func writeFP8Pair(t *testing.T, src string, block [2]int) (fp8Dir, deqDir string) {
	t.Helper()
	return modeltest.WriteFP8Pair(t, fixtureDir(src), block)
}

// TestFP8CheckpointMatchesDequantised loads FP8 copies of the fixtures
// (per-expert keys; 32x32 and 128x128 blocks over hidden 64 and experts of
// 32: partial blocks) and checks the logits of a prompt against the same
// model with the weights dequantised to F32: the FP8 MatMul (and the MoE
// op over FP8 experts) equals dequantise-then-f32-matmul within float32
// rounding (1e-4 in logits), for the SIMD and portable kernels.
func TestFP8CheckpointMatchesDequantised(t *testing.T) {
	for _, block := range [][2]int{{32, 32}, {128, 128}} {
		fp8Dir, deqDir := writeFP8Pair(t, "qwen3moe-a", block)
		for _, simd := range []bool{true, false} {
			var logits [2][][]float32
			for i, dir := range []string{fp8Dir, deqDir} {
				be := cpu.New(cpu.Options{Threads: 2, NoSIMD: !simd})
				r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 128, MaxBatchTokens: 64, PageSize: 16, Backend: be, Experts: "backend"})
				if err != nil {
					be.Close()
					t.Fatal(err)
				}
				prompt := modeltest.ReadRef(t, "qwen3moe-a")[1].PromptIDs[:40]
				logits[i] = modeltest.Forward(t, testRunner{r}, 0, prompt, true)
				r.Close()
				be.Close()
			}
			var worst float64
			for i := range logits[0] {
				for j := range logits[0][i] {
					worst = math.Max(worst, math.Abs(float64(logits[0][i][j]-logits[1][i][j])))
				}
			}
			t.Logf("block %v simd %v: max |logit diff| %.3g", block, simd, worst)
			if worst > 1e-4 {
				t.Errorf("block %v simd %v: FP8 checkpoint logits differ from the dequantised one by %g", block, simd, worst)
			}
		}
	}
}
