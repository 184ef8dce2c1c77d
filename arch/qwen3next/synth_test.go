package qwen3next

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/internal/settings"
	"github.com/ktserve/kt/model"
)

// TestSyntheticLoadsAndRuns writes small synthetic Qwen3.5 checkpoints in
// both expert layouts and checks that they load, run and agree.
func TestSyntheticLoadsAndRuns(t *testing.T) {
	shape := SynthShape{Layers: 4, Hidden: 32, Heads: 2, KVHeads: 1, HeadDim: 16,
		LinKHeads: 2, LinVHeads: 4, LinKDim: 8, LinVDim: 8, Experts: 4, TopK: 2, MoEInter: 8, SharedInter: 8, Vocab: 50}
	modeltest.LayoutsAgree(t, func(dir string, fused bool) error {
		shape.Fused = fused
		return WriteSynthetic(dir, shape, 1)
	}, func(dir string) (model.Runner, error) {
		return Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 32, MaxBatchTokens: 8})
	})
	if b := Qwen35_35B_A3B.ActiveBytesPerToken(); b < 5e9 || b > 7e9 {
		t.Errorf("Qwen3.5-35B-A3B reads %d bytes per token, want about 3B active params in bf16", b)
	}
}

// TestMakeSynthetic writes a Qwen3.5-35B-A3B-shaped checkpoint to
// $KT_SYNTH_OUT with $KT_SYNTH_LAYERS layers (default 8) for the decode
// benchmark; skipped unless KT_SYNTH_OUT is set.
func TestMakeSynthetic(t *testing.T) {
	modeltest.MakeSynthetic(t, "Qwen3.5-35B-A3B", func(dir string, layers int) error {
		s := Qwen35_35B_A3B
		s.Layers = layers
		if err := WriteSynthetic(dir, s, 42); err != nil {
			return err
		}
		t.Logf("%d layers: %.2f GB of weights read per decoded token", s.Layers, float64(s.ActiveBytesPerToken())/1e9)
		return nil
	})
}

// BenchmarkDecodeSynthetic decodes single tokens on the checkpoint in
// $KT_SYNTH_DIR (see TestMakeSynthetic) after a 32-token prompt; it reports
// tokens/s and the effective weight-read bandwidth. Skipped without the
// variable.
func BenchmarkDecodeSynthetic(b *testing.B) {
	dir := settings.SynthDir.Get()
	if dir == "" {
		b.Skip("set KT_SYNTH_DIR to a checkpoint written by TestMakeSynthetic")
	}
	r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 1 << 16, MaxBatchTokens: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(i*37%150000 + 10)
	}
	var out model.Logits
	step := func(toks []int32) {
		if err := r.Reserve(0, len(toks)); err != nil {
			b.Fatal(err)
		}
		pos := r.rb.Pool.Len(0)
		if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Pos: pos, Tokens: toks}}}, &out); err != nil {
			b.Fatal(err)
		}
	}
	step(prompt)
	b.ResetTimer()
	for i := range b.N {
		step([]int32{int32(i%1000 + 10)})
	}
	s := Qwen35_35B_A3B
	s.Layers = r.cfg.NumLayers
	tps := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(tps, "tok/s")
	b.ReportMetric(tps*float64(s.ActiveBytesPerToken())/1e9, "GB/s")
}

// TestExpertEngineMatchesReference runs a synthetic Qwen3.5 model whose
// shapes the CPU expert engine supports (hidden 128) with the routed
// experts on the engine and on the backend's reference MoE op (the shared
// expert stays on the backend either way) and compares every prompt
// logprob.
func TestExpertEngineMatchesReference(t *testing.T) {
	dir, shape := writeEngineSynth(t, 3)
	modeltest.EngineMatchesReference(t, shape.Vocab, func(experts string) (modeltest.EngineRunner, error) {
		r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts})
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}

// writeEngineSynth writes the small synthetic Qwen3.5 model the engine and
// hybrid tests share (4 layers: 3 Gated DeltaNet + 1 attention, 8 experts
// top-2, shared expert, hidden 128 so the CPU expert engine serves it) with
// the given seed into a temporary directory.
func writeEngineSynth(t *testing.T, seed uint64) (string, SynthShape) {
	t.Helper()
	dir := t.TempDir()
	shape := SynthShape{Layers: 4, Hidden: 128, Heads: 2, KVHeads: 1, HeadDim: 32,
		LinKHeads: 2, LinVHeads: 4, LinKDim: 16, LinVDim: 16, Experts: 8, TopK: 2, MoEInter: 64, SharedInter: 32, Vocab: 300}
	if err := WriteSynthetic(dir, shape, seed); err != nil {
		t.Fatal(err)
	}
	return dir, shape
}
