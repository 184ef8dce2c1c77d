//go:build linux && amd64 && cgo

package deepseekv3

import (
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/placement"
	"github.com/ktserve/kt/safetensors"
)

// TestFP8CheckpointCPUExperts serves an FP8 copy (128 x 128 blocks, as the
// official checkpoints) of a synthetic DeepSeek-V3 model with experts of
// 128 and its routed experts on the CPU expert engine
// (modeltest.FP8CheckpointCPUExperts).
func TestFP8CheckpointCPUExperts(t *testing.T) {
	src := t.TempDir()
	shape := engineShape(1)
	shape.MoEInter = 128
	if err := WriteSynthetic(src, shape, 6); err != nil {
		t.Fatal(err)
	}
	prompt := []int32{3, 17, 99, 4, 250, 31, 8, 77, 120, 5, 61, 200}
	modeltest.FP8CheckpointCPUExperts(t, src, prompt, func(dir string, o arch.Options) (modeltest.Runner, error) {
		r, err := Load(dir, o)
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}

// writePackedModel writes a synthetic DeepSeek-V3 model (engineShape(1))
// with experts of inter columns into src, its copy with the routed experts
// pack-quantized INT4 in groups of 32 (Kimi-K2-Thinking's) into packedDir
// and the copy's f32 values into deqDir (modeltest.WritePackedInt4Pair).
func writePackedModel(t *testing.T, inter int) (src, packedDir, deqDir string) {
	t.Helper()
	src = t.TempDir()
	shape := engineShape(1)
	shape.MoEInter = inter
	if err := WriteSynthetic(src, shape, 8); err != nil {
		t.Fatal(err)
	}
	packedDir, deqDir = modeltest.WritePackedInt4Pair(t, src, 32)
	return src, packedDir, deqDir
}

// TestPackedInt4CheckpointCPUExperts serves a synthetic DeepSeek-V3 model
// whose routed experts are compressed-tensors pack-quantized INT4 (groups
// of 32, as Kimi-K2-Thinking ships them) on the CPU expert engine: each
// method gives the logits of the same model with those experts as the f32
// values they stand for, bit for bit.
func TestPackedInt4CheckpointCPUExperts(t *testing.T) {
	src, packedDir, deqDir := writePackedModel(t, 128)
	// the checkpoint check (kt inspect, kt doctor) accounts for the
	// packed experts: a quarter of the bytes of their bf16 form and then
	// some (the group scales)
	reports := map[string]*modelconfig.Report{}
	for _, dir := range []string{src, packedDir} {
		c, err := modelconfig.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		reports[dir] = modelconfig.Check(c, ck)
		ck.Close()
		if len(reports[dir].Problems) > 0 {
			t.Fatalf("%s: %v", dir, reports[dir].Problems)
		}
	}
	if p, b := reports[packedDir].RoutedExpertBytes, reports[src].RoutedExpertBytes; 4*p <= b || 3*p > b {
		t.Errorf("routed expert bytes: packed %d, bf16 %d", p, b)
	}
	prompt := []int32{3, 17, 99, 4, 250, 31, 8, 77, 120, 5, 61, 200}
	runWith := func(dir string, o arch.Options) [][]float32 {
		t.Helper()
		o.MaxSeqs, o.MaxTotalTokens, o.MaxBatchTokens, o.Threads = 1, 128, 64, 2
		r, err := Load(dir, o)
		if err != nil {
			t.Fatalf("%s with %+v: %v", dir, o, err)
		}
		defer r.Close()
		return modeltest.Forward(t, testRunner{r}, 0, prompt, true)
	}
	run := func(dir, experts string) [][]float32 {
		t.Helper()
		r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 128, MaxBatchTokens: 64, Threads: 2, Experts: experts})
		if err != nil {
			t.Fatalf("%s with experts %s: %v", dir, experts, err)
		}
		defer r.Close()
		return modeltest.Forward(t, testRunner{r}, 0, prompt, true)
	}
	for _, m := range []string{"AMXBF16", "AMXINT8", "AMXINT4"} {
		modeltest.RequireIdentical(t, m+": packed INT4 vs its f32 values", run(packedDir, m), run(deqDir, m))
	}
	// RAWINT4 runs the codes themselves ("auto" picks it): against the
	// reference MoE op on their f32 values only the engine's int8 rounding
	// of its activations differs
	raw := run(packedDir, "RAWINT4")
	modeltest.RequireIdentical(t, "auto vs RAWINT4", run(packedDir, "auto"), raw)
	ref := modeltest.LogSoftmaxRows(run(deqDir, "backend"))
	// device experts (2 a layer) run on the backend's MoE op as their bf16
	// values, the rest on RAWINT4
	for _, c := range []struct {
		what string
		rows [][]float32
	}{
		{"RAWINT4", raw},
		{"RAWINT4 + 2 device experts a layer", runWith(packedDir, arch.Options{Experts: "RAWINT4", GPUExperts: placement.Request{PerLayer: 2}})},
		{"the backend's MoE op on the bf16 values", run(packedDir, "backend")},
	} {
		worst := modeltest.WorstDiff(ref, modeltest.LogSoftmaxRows(c.rows))
		t.Logf("%s vs the reference op on the f32 values: worst logprob difference %.3g", c.what, worst)
		if worst > modeltest.EngineBF16Tol {
			t.Errorf("%s differs from the reference op by %.3g > %g", c.what, worst, modeltest.EngineBF16Tol)
		}
	}
}

// TestPackedInt4SmallShapes serves a packed INT4 model whose expert width
// (96) the CPU expert engine's int4 panels cannot take: "auto" runs its
// experts on the backend's MoE op as their bf16 values, within the bound of
// the reference op on their f32 values.
func TestPackedInt4SmallShapes(t *testing.T) {
	_, packedDir, deqDir := writePackedModel(t, 96)
	prompt := []int32{3, 17, 99, 4, 250, 31, 8, 77}
	run := func(dir, experts, want string) [][]float64 {
		t.Helper()
		r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts})
		if err != nil {
			t.Fatalf("%s with experts %s: %v", dir, experts, err)
		}
		defer r.Close()
		modeltest.RequireExpertPath(t, experts, r.ExpertPath(), want)
		lps := modeltest.LogSoftmaxRows(modeltest.Forward(t, testRunner{r}, 0, prompt, true))
		return lps
	}
	worst := modeltest.WorstDiff(run(deqDir, "backend", "backend MoE op"), run(packedDir, "auto", "as their bf16 values"))
	t.Logf("auto (the backend's op on the bf16 values) vs the reference op on the f32 values: worst logprob difference %.3g", worst)
	if worst > modeltest.EngineBF16Tol {
		t.Errorf("packed INT4 on the backend's op differs by %.3g > %g", worst, modeltest.EngineBF16Tol)
	}
}

// TestPackedInt4Refusals checks that a checkpoint with packed INT4 routed
// experts is refused, with the reason, where they would not run on the CPU
// expert engine or as their bf16 values on the backend's MoE op: the
// in-place BF16 method and layerwise prefill; and that RAWINT4 refuses
// experts that are not packed.
func TestPackedInt4Refusals(t *testing.T) {
	src, packedDir, _ := writePackedModel(t, 128)
	for _, c := range []struct {
		name string
		dir  string
		o    arch.Options
		want string
	}{
		{"BF16 in place", packedDir, arch.Options{Experts: "BF16"}, "cannot be used by method BF16"},
		{"layerwise prefill", packedDir, arch.Options{Experts: "RAWINT4", GPUPrefillThreshold: 16}, "layerwise prefill does not upload"},
		{"RAWINT4 of bf16 experts", src, arch.Options{Experts: "RAWINT4"}, "this checkpoint's are not packed"},
	} {
		c.o.MaxSeqs, c.o.MaxTotalTokens, c.o.MaxBatchTokens, c.o.Threads = 1, 64, 64, 2
		r, err := Load(c.dir, c.o)
		if err == nil {
			r.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
