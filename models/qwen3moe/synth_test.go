package qwen3moe

import (
	"math"
	"os"
	"strconv"
	"testing"

	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/models"
	"github.com/ktserve/kt/models/internal/modeltest"
)

// TestSyntheticLoadsAndRuns writes small synthetic checkpoints in both
// expert layouts and checks that they load and give the same logits (the
// layouts hold the same bytes in the same order for a fixed seed).
func TestSyntheticLoadsAndRuns(t *testing.T) {
	shape := SynthShape{Layers: 2, Hidden: 32, Heads: 4, KVHeads: 2, HeadDim: 16, Experts: 4, TopK: 2, MoEInter: 8, Vocab: 50}
	var logits [2][]float32
	for i, fused := range []bool{false, true} {
		dir := t.TempDir()
		shape.Fused = fused
		if err := WriteSynthetic(dir, shape, 1); err != nil {
			t.Fatal(err)
		}
		r, err := Load(dir, models.Options{MaxSeqs: 1, MaxTotalTokens: 32, MaxBatchTokens: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := r.Reserve(0, 3); err != nil {
			t.Fatal(err)
		}
		var out model.Logits
		if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{1, 2, 3}}}}, &out); err != nil {
			t.Fatal(err)
		}
		logits[i] = append([]float32(nil), out.Rows[0][0]...)
		for _, v := range logits[i] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("non-finite logit %v", v)
			}
		}
	}
	for j := range logits[0] {
		if logits[0][j] != logits[1][j] {
			t.Fatalf("per-expert and fused layouts differ at %d: %v vs %v", j, logits[0][j], logits[1][j])
		}
	}
}

// TestMakeSynthetic writes a Qwen3-30B-A3B-shaped checkpoint to
// $KT_SYNTH_OUT with $KT_SYNTH_LAYERS layers (default 8) for the decode
// benchmark; skipped unless KT_SYNTH_OUT is set.
func TestMakeSynthetic(t *testing.T) {
	dir := os.Getenv("KT_SYNTH_OUT")
	if dir == "" {
		t.Skip("set KT_SYNTH_OUT=DIR (and KT_SYNTH_LAYERS) to write a Qwen3-30B-A3B-shaped checkpoint")
	}
	s := Qwen3_30B_A3B
	s.Layers = 8
	if v, err := strconv.Atoi(os.Getenv("KT_SYNTH_LAYERS")); err == nil && v > 0 {
		s.Layers = v
	}
	if err := WriteSynthetic(dir, s, 42); err != nil {
		t.Fatal(err)
	}
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
		r, err := Load(dir, models.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts})
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
