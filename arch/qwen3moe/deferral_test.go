package qwen3moe

import (
	"math"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

// TestDeferralMatchesReference runs expert deferral (1 and 2 of top-4)
// on a synthetic 3-layer Qwen3-MoE model with the routed experts on the
// CPU expert engine and on the backend's reference MoE op, and compares
// every logprob of a 3-token prompt and 8 decode steps.
func TestDeferralMatchesReference(t *testing.T) {
	dir := t.TempDir()
	shape := SynthShape{Layers: 3, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Experts: 8, TopK: 4, MoEInter: 64, Vocab: 300, Exp: 123}
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

// TestDeferralLastLayerNeverDefers checks that a model whose only MoE
// layer is its last runs bit-identically with every expert deferrable
// (D = k) and without deferral, on the engine and on the reference op:
// the last MoE layer defers nothing.
func TestDeferralLastLayerNeverDefers(t *testing.T) {
	dir := t.TempDir()
	shape := SynthShape{Layers: 1, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Experts: 8, TopK: 4, MoEInter: 64, Vocab: 300, Exp: 123}
	if err := WriteSynthetic(dir, shape, 5); err != nil {
		t.Fatal(err)
	}
	for _, experts := range []string{"backend", "BF16"} {
		var rows [2][][]float32
		for i, d := range []int{0, shape.TopK} {
			r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: experts, ExpertDeferral: d})
			if err != nil {
				if experts != "backend" {
					t.Skipf("CPU expert engine unavailable: %v", err)
				}
				t.Fatal(err)
			}
			if got := r.routed.Deferred(0); got != 0 {
				t.Errorf("%s, D=%d: the last MoE layer defers %d", experts, d, got)
			}
			rows[i] = modeltest.Forward(t, testRunner{r}, 0, []int32{3, 14, 15, 92}, true)
			rows[i] = append(rows[i], modeltest.Forward(t, testRunner{r}, 0, []int32{65}, false)...)
			r.Close()
		}
		modeltest.RequireIdentical(t, experts+": D=k vs D=0", rows[1], rows[0])
	}
}

// TestDeferralAcrossDenseLayers runs the qwen3moe-c fixture (MoE layers 1
// and 3, dense 0 and 2) with deferral on the backend's reference op (the
// engine does not serve hidden 64): layer 1's deferred experts land in
// layer 3, so the logits move, and stay finite.
func TestDeferralAcrossDenseLayers(t *testing.T) {
	var rows [2][][]float32
	for i, d := range []int{0, 1} {
		r, err := Load(modeltest.FixtureDir("qwen3moe-c"), arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: "backend", ExpertDeferral: d})
		if err != nil {
			t.Fatal(err)
		}
		if d > 0 {
			for l, want := range []int{0, 1, 0, 0} {
				if got := r.routed.Deferred(l); got != want {
					t.Errorf("layer %d defers %d, want %d", l, got, want)
				}
			}
		}
		rows[i] = modeltest.Forward(t, testRunner{r}, 0, []int32{5, 7}, true)
		r.Close()
	}
	moved := 0.0
	for j := range rows[0] {
		for v := range rows[0][j] {
			if x := float64(rows[1][j][v]); math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("row %d logit %d: %v", j, v, x)
			}
			moved = max(moved, math.Abs(float64(rows[1][j][v]-rows[0][j][v])))
		}
	}
	t.Logf("logits moved by %.3g", moved)
	if moved == 0 {
		t.Error("deferral did not change the logits")
	}
}
