package deepseekv3

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/moe/placement"
)

// fixtures are the transformers reference checkpoints (testdata/models).
var fixtures = []string{"deepseekv3-a", "deepseekv3-b", "deepseekv3-c", "deepseekv3-fp8"}

var fixtureDir = modeltest.FixtureDir

// testRunner lets modeltest read slot lengths.
type testRunner struct{ *Runner }

func (r testRunner) SlotLen(slot int) int { return r.rb.Pool.Len(slot) }

func load(t *testing.T, name string, simd bool) testRunner {
	t.Helper()
	return testRunner{modeltest.LoadFixture(t, name, simd, "backend", Load)}
}

// TestMatchesTransformers checks every prompt logprob and, teacher-forcing
// the reference's greedy continuation through the latent cache, every
// greedy token (where the reference's top-2 margin exceeds 1e-3), its
// logprob and the top-8 logprobs, for the SIMD and the portable kernels.
func TestMatchesTransformers(t *testing.T) {
	modeltest.MatchesTransformersAll(t, fixtures, nil, func(t *testing.T, fx string, simd bool) modeltest.Runner {
		return load(t, fx, simd)
	})
}

// TestChunkedPrefillIdentical prefills the longest prompt in chunks of
// several sizes and checks the logits are bit-identical to one prefill.
func TestChunkedPrefillIdentical(t *testing.T) {
	for _, fx := range fixtures {
		modeltest.ChunkedPrefillIdentical(t, load(t, fx, true), fx, 0, []int{1, 5, 16, 17, 64, 100})
	}
}

// TestMixedBatchIdentical runs several sequences at different positions in
// one step (a decode, a prefill chunk starting mid-prompt, a fresh prompt)
// and checks each row against the sequence run alone.
func TestMixedBatchIdentical(t *testing.T) {
	for _, fx := range fixtures {
		modeltest.MixedBatchIdentical(t, load(t, fx, true), fx)
	}
}

// TestForwardRejectsBadBatches checks misuse is an error, not a panic, and
// leaves the slot unchanged.
func TestForwardRejectsBadBatches(t *testing.T) {
	modeltest.RejectsBadBatches(t, load(t, "deepseekv3-a", true))
}

func TestLoadErrors(t *testing.T) {
	modeltest.LoadErrors(t, func(dir string) error {
		_, err := Load(dir, arch.Options{})
		return err
	}, "deepseekv3-a", "deepseekv3-b")
}

// TestRegistry loads a fixture through arch.Load and checks the
// multi-token-prediction layer is skipped with one note.
func TestRegistry(t *testing.T) {
	var notes []string
	r, err := arch.Load(fixtureDir("deepseekv3-a"), arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16,
		Notify: func(s string) { notes = append(notes, s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info := r.Info(); info.Architecture != Architecture || info.VocabSize != 1000 || len(info.EOSTokenIDs) == 0 {
		t.Fatalf("info %+v", info)
	}
	mtp := 0
	for _, n := range notes {
		if strings.Contains(n, "multi-token-prediction") {
			mtp++
		}
	}
	if mtp != 1 {
		t.Errorf("notes %q: want one about the multi-token-prediction layer", notes)
	}
}

// TestGraphDecodeIdentical checks the decode graph path (padding rows
// routed nowhere) against op-by-op steps, bit for bit.
func TestGraphDecodeIdentical(t *testing.T) {
	modeltest.GraphDecodeIdentical(t, "deepseekv3-a", Load)
}

// TestPrefixCacheIdentical caches a prompt's full pages, attaches them to a
// second request with the same prefix and checks its logits are
// bit-identical to a run without the cache.
func TestPrefixCacheIdentical(t *testing.T) {
	const fx = "deepseekv3-a"
	r := load(t, fx, true)
	c := modeltest.ReadRef(t, fx)[1]
	want := modeltest.Forward(t, r, 0, c.PromptIDs, true)
	pc, ok := model.As[model.PrefixCache](r.Runner)
	if !ok {
		t.Fatal("no prefix cache")
	}
	if err := pc.CachePrefix(0, 0, c.PromptIDs); err != nil {
		t.Fatal(err)
	}
	r.Free(0)
	got, err := pc.MatchPrefix(1, 0, c.PromptIDs)
	if err != nil {
		t.Fatal(err)
	}
	if got == 0 || got%16 != 0 {
		t.Fatalf("matched %d tokens", got)
	}
	rows := modeltest.Forward(t, r, 1, c.PromptIDs[got:], true)
	modeltest.RequireIdentical(t, "after the cached prefix", rows, want[got:])
}

// TestSyntheticLoadsAndRuns writes small synthetic checkpoints in both
// expert layouts and checks that they load and give the same logits.
func TestSyntheticLoadsAndRuns(t *testing.T) {
	shape := SynthShape{Layers: 2, DenseLayers: 1, Hidden: 32, Heads: 2, QLoRA: 16, KVLoRA: 16, Nope: 8, Rope: 4, V: 8,
		Experts: 8, TopK: 2, MoEInter: 8, Shared: 1, Dense: 24, Groups: 2, TopKGroups: 1, Vocab: 50}
	modeltest.LayoutsAgree(t, func(dir string, fused bool) error {
		shape.Fused = fused
		return WriteSynthetic(dir, shape, 1)
	}, func(dir string) (model.Runner, error) {
		return Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 32, MaxBatchTokens: 8})
	})
}

// TestMakeSynthetic writes a DeepSeek-V3-shaped checkpoint to
// $KT_SYNTH_OUT with $KT_SYNTH_LAYERS layers (default 8) for the decode
// benchmark; skipped unless KT_SYNTH_OUT is set.
func TestMakeSynthetic(t *testing.T) {
	modeltest.MakeSynthetic(t, "DeepSeek-V3", func(dir string, layers int) error {
		s := DeepSeekV3
		s.Layers = layers
		return WriteSynthetic(dir, s, 42)
	})
}

// TestExpertEngineMatchesReference runs a synthetic model whose shapes the
// CPU expert engine supports through the engine (its routing ids and
// weights from the grouped router) and through the backend's reference MoE
// op and compares every prompt logprob.
func TestExpertEngineMatchesReference(t *testing.T) {
	dir := t.TempDir()
	shape := SynthShape{Layers: 2, DenseLayers: 1, Hidden: 128, Heads: 2, QLoRA: 32, KVLoRA: 32, Nope: 16, Rope: 8, V: 16,
		Experts: 8, TopK: 3, MoEInter: 64, Shared: 1, Dense: 96, Groups: 4, TopKGroups: 2, Vocab: 300, Exp: 123}
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

// TestNeedsMLABackend checks a backend without the MLA op is refused by
// name.
func TestNeedsMLABackend(t *testing.T) {
	dir := t.TempDir()
	shape := SynthShape{Layers: 1, Hidden: 32, Heads: 2, KVLoRA: 16, Nope: 8, Rope: 4, V: 8,
		Experts: 4, TopK: 2, MoEInter: 8, Groups: 1, TopKGroups: 1, Vocab: 50}
	if err := WriteSynthetic(dir, shape, 1); err != nil {
		t.Fatal(err)
	}
	be := plainBackend{cpu.New(cpu.Options{Threads: 1})} // the op set without MLA
	defer be.Close()
	_, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 32, MaxBatchTokens: 8, Backend: be})
	if err == nil || !strings.Contains(err.Error(), "multi-head latent attention") {
		t.Fatalf("err = %v, want a refusal naming the MLA op", err)
	}
}

// plainBackend is a backend with only the Backend interface's methods.
type plainBackend struct{ backend.Backend }

// TestTensorParallel runs a synthetic checkpoint over 2 and 4 CPU ranks
// against one rank (modeltest.TPMatchesSingle): the attention heads split
// (their rows of q_b_proj or q_proj and kv_b_proj, their columns of
// o_proj, the latent cache whole on every rank), the dense MLP and shared
// experts column/row-parallel, the routed experts on rank 0 or with device
// experts split over the ranks; and a size the heads do not divide.
func TestTensorParallel(t *testing.T) {
	shape := SynthShape{Layers: 3, DenseLayers: 1, Hidden: 64, Heads: 4, QLoRA: 32, KVLoRA: 32, Nope: 16, Rope: 8, V: 16,
		Experts: 8, TopK: 2, MoEInter: 32, Shared: 1, Dense: 64, Groups: 2, TopKGroups: 1, Vocab: 256, Exp: 122}
	qlora, qproj := t.TempDir(), t.TempDir()
	if err := WriteSynthetic(qlora, shape, 7); err != nil {
		t.Fatal(err)
	}
	shape.QLoRA, shape.Shared = 0, 0 // one q_proj, no shared experts (rank 0's routed output broadcast)
	if err := WriteSynthetic(qproj, shape, 8); err != nil {
		t.Fatal(err)
	}
	// three prompts (the mixed batch's: the second over 30 tokens, the
	// third at least 40), each followed by 4 greedy steps
	var cases []modeltest.Case
	for i, n := range []int{12, 36, 48} {
		c := modeltest.Case{Name: fmt.Sprintf("synthetic %d", i), GreedyIDs: make([]int32, 4)}
		for j := range n {
			c.PromptIDs = append(c.PromptIDs, int32((j*53+i*17+1)%shape.Vocab))
		}
		cases = append(cases, c)
	}
	three := placement.Request{PerLayer: 3}
	modeltest.TPMatchesSingle(t, []modeltest.TPCase{
		{Fixture: "synthetic-qlora", Dir: qlora, Cases: cases, Size: 2},
		{Fixture: "synthetic-qlora", Dir: qlora, Cases: cases, Size: 4},
		{Fixture: "synthetic-qproj", Dir: qproj, Cases: cases, Size: 2},
		{Fixture: "synthetic-qlora", Dir: qlora, Cases: cases, Size: 4, Device: three},
		{Fixture: "synthetic-qlora", Dir: qlora, Cases: cases, Size: 3, Refusal: "num_attention_heads: 4 does not divide over tensor-parallel size 3"},
	})
}
