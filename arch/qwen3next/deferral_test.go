package qwen3next

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

// TestDeferralMatchesReference runs expert deferral
// (--kt-max-deferred-experts-per-token 1 and 2) on a synthetic Qwen3.5
// model (4 MoE layers: 3 Gated DeltaNet + 1 attention, 8 experts top-2,
// shared expert; hidden 128, so the CPU expert engine serves it) with the
// routed experts on the engine and with the backend's reference MoE op,
// and compares every logprob of a 3-token prompt and 8 decode steps.
func TestDeferralMatchesReference(t *testing.T) {
	dir, shape := writeEngineSynth(t, 3)
	modeltest.DeferralMatchesReference(t, shape.Vocab, []int{1, 2}, func(experts string, d int) (modeltest.EngineRunner, error) {
		r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts, ExpertDeferral: d})
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
