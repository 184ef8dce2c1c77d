package qwen3moe

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/model"
)

// TestSyntheticLoadsAndRuns writes small synthetic checkpoints in both
// expert layouts and checks that they load and give the same logits (the
// layouts hold the same bytes in the same order for a fixed seed).
func TestSyntheticLoadsAndRuns(t *testing.T) {
	shape := SynthShape{Layers: 2, Hidden: 32, Heads: 4, KVHeads: 2, HeadDim: 16, Experts: 4, TopK: 2, MoEInter: 8, Vocab: 50}
	modeltest.LayoutsAgree(t, func(dir string, fused bool) error {
		shape.Fused = fused
		return WriteSynthetic(dir, shape, 1)
	}, func(dir string) (model.Runner, error) {
		return Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 32, MaxBatchTokens: 8})
	})
}

// TestMakeSynthetic writes a Qwen3-30B-A3B-shaped checkpoint to
// $KT_SYNTH_OUT with $KT_SYNTH_LAYERS layers (default 8) for the decode
// benchmark; skipped unless KT_SYNTH_OUT is set.
func TestMakeSynthetic(t *testing.T) {
	modeltest.MakeSynthetic(t, "Qwen3-30B-A3B", func(dir string, layers int) error {
		s := Qwen3_30B_A3B
		s.Layers = layers
		return WriteSynthetic(dir, s, 42)
	})
}

// TestExpertEngineMatchesReference runs a synthetic model whose shapes the
// CPU expert engine supports through the engine and through the backend's
// reference MoE op and compares every prompt logprob.
func TestExpertEngineMatchesReference(t *testing.T) {
	dir := t.TempDir()
	shape := SynthShape{Layers: 2, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Experts: 8, TopK: 2, MoEInter: 64, Vocab: 300, Exp: 123}
	if err := WriteSynthetic(dir, shape, 3); err != nil {
		t.Fatal(err)
	}
	modeltest.EngineMatchesReference(t, shape.Vocab, func(experts string) (modeltest.EngineRunner, error) {
		r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts})
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
