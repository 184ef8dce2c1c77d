package deepseekv3

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

// engineShape is a synthetic DeepSeek-V3 the CPU expert engine serves
// (hidden 128, experts of 64), with q LoRA, 4 groups of 2 experts (2
// eligible) and shared experts; dense sets the leading dense layers. Its
// weights are of magnitude 2^-6..2^-5 (Exp 121): with 2^-4..2^-3 the model
// amplifies the engine's bf16 rounding of the activations in its AMX
// prefill (the reference here) to 0.02–0.03 in logprob, while the GPU
// and the CPU's reference op still agree within 1.5e-4.
func engineShape(dense int) SynthShape {
	return SynthShape{Layers: 4, DenseLayers: dense, Hidden: 128, Heads: 4, QLoRA: 32, KVLoRA: 32, Nope: 16, Rope: 8, V: 16,
		Experts: 8, TopK: 3, MoEInter: 64, Shared: 1, Dense: 96, Groups: 4, TopKGroups: 2, Vocab: 300, Exp: 121}
}

// TestExpertRecorder checks the expert-distribution recorder on a
// synthetic DeepSeek-V3 model with a dense first layer and the grouped
// router, which the CPU expert engine serves, through the backend's MoE
// op, the engine and decode graphs (modeltest.ExpertRecorder).
func TestExpertRecorder(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSynthetic(dir, engineShape(1), 4); err != nil {
		t.Fatal(err)
	}
	modeltest.ExpertRecorder(t, dir, func(dir string, o arch.Options) (modeltest.Runner, error) {
		r, err := Load(dir, o)
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}

// TestDeferralMatchesReference runs expert deferral
// (--kt-max-deferred-experts-per-token 1 and 2 of top-3) on a synthetic
// DeepSeek-V3 model (a dense first layer, 3 MoE layers with the grouped
// router and a shared expert) with the routed experts on the CPU expert
// engine and with the backend's reference MoE op, and compares every
// logprob of a 3-token prompt and 8 decode steps.
func TestDeferralMatchesReference(t *testing.T) {
	dir := t.TempDir()
	shape := engineShape(1)
	if err := WriteSynthetic(dir, shape, 5); err != nil {
		t.Fatal(err)
	}
	modeltest.DeferralMatchesReference(t, shape.Vocab, []int{1, 2}, func(experts string, d int) (modeltest.EngineRunner, error) {
		r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts, ExpertDeferral: d})
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
