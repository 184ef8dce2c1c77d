package deepseekv3

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

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
