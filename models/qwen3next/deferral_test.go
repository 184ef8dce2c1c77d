package qwen3next

import (
	"testing"

	"github.com/ktserve/kt/models"
	"github.com/ktserve/kt/models/internal/modeltest"
)

// TestDeferralMatchesReference runs expert deferral
// (--kt-max-deferred-experts-per-token 1 and 2) on a synthetic Qwen3.5
// model (4 MoE layers: 3 Gated DeltaNet + 1 attention, 8 experts top-2,
// shared expert; hidden 128, so the CPU expert engine serves it) with the
// routed experts on the engine and with the backend's reference MoE op,
// and compares every logprob of a 3-token prompt and 8 decode steps.
func TestDeferralMatchesReference(t *testing.T) {
	dir := t.TempDir()
	shape := SynthShape{Layers: 4, Hidden: 128, Heads: 2, KVHeads: 1, HeadDim: 32,
		LinKHeads: 2, LinVHeads: 4, LinKDim: 16, LinVDim: 16, Experts: 8, TopK: 2, MoEInter: 64, SharedInter: 32, Vocab: 300}
	if err := WriteSynthetic(dir, shape, 3); err != nil {
		t.Fatal(err)
	}
	modeltest.DeferralMatchesReference(t, shape.Vocab, []int{1, 2}, func(experts string, d int) (modeltest.EngineRunner, error) {
		r, err := Load(dir, models.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts, ExpertDeferral: d})
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
