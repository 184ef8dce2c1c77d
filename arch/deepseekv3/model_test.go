package deepseekv3

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/moe/placement"
)

// testRunner lets modeltest read slot lengths.
type testRunner struct{ *Runner }

func (r testRunner) SlotLen(slot int) int { return r.rb.Pool.Len(slot) }

// structShapes are synthetic checkpoints in the shapes of the reference
// fixtures (tools/fixtures/gen_hf_fixtures.py deepseekv3-a and -b): q LoRA,
// groups, a dense first layer; and one q_proj, one group, two shared
// experts, fused experts.
var structShapes = map[string]SynthShape{
	"a": {Layers: 3, DenseLayers: 1, Hidden: 64, Heads: 4, QLoRA: 48, KVLoRA: 32, Nope: 32, Rope: 16, V: 24,
		Experts: 16, TopK: 4, MoEInter: 32, Shared: 1, Dense: 96, Groups: 4, TopKGroups: 2, Vocab: 1000, Exp: 122, MTP: true},
	"b": {Layers: 3, Hidden: 64, Heads: 8, KVLoRA: 32, Nope: 32, Rope: 16, V: 24,
		Experts: 24, TopK: 6, MoEInter: 32, Shared: 2, Dense: 96, Groups: 1, TopKGroups: 1, Vocab: 1000, Exp: 122, Fused: true},
}

// structModel writes the synthetic checkpoint of structShapes[name] and
// returns its directory and prompts of 8, 70 and 200 random tokens.
func structModel(t *testing.T, name string) (string, []modeltest.Case) {
	t.Helper()
	dir := t.TempDir()
	s := structShapes[name]
	if err := WriteSynthetic(dir, s, 7); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(len(name)), 9))
	var cases []modeltest.Case
	for _, n := range []int{8, 70, 200} {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(s.Vocab))
		}
		cases = append(cases, modeltest.Case{Name: fmt.Sprintf("len%d", n), PromptIDs: ids})
	}
	return dir, cases
}

// loadStruct loads the synthetic checkpoint in dir on the CPU backend with
// 4 slots and 512 tokens a step.
func loadStruct(t *testing.T, dir string) testRunner {
	t.Helper()
	r, err := Load(dir, arch.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, Threads: 2, Experts: "backend"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return testRunner{r}
}

// TestChunkedPrefillIdentical prefills the longest prompt in chunks of
// several sizes and checks the logits are bit-identical to one prefill.
func TestChunkedPrefillIdentical(t *testing.T) {
	for name := range structShapes {
		dir, cases := structModel(t, name)
		modeltest.ChunkedPrefillCases(t, loadStruct(t, dir), name, cases, 0, []int{1, 5, 16, 17, 64, 100})
	}
}

// TestMixedBatchIdentical runs several sequences at different positions in
// one step (a decode, a prefill chunk starting mid-prompt, a fresh prompt)
// and checks each row against the sequence run alone.
func TestMixedBatchIdentical(t *testing.T) {
	for name := range structShapes {
		dir, cases := structModel(t, name)
		modeltest.MixedBatchCases(t, loadStruct(t, dir), name, cases)
	}
}

// TestForwardRejectsBadBatches checks misuse is an error, not a panic, and
// leaves the slot unchanged.
func TestForwardRejectsBadBatches(t *testing.T) {
	dir, _ := structModel(t, "a")
	modeltest.RejectsBadBatches(t, loadStruct(t, dir))
}

// TestLoadErrors: an empty directory, a config without weights, and
// weights of another shape are errors.
func TestLoadErrors(t *testing.T) {
	a, _ := structModel(t, "a")
	b, _ := structModel(t, "b")
	modeltest.LoadErrorsIn(t, func(dir string) error {
		_, err := Load(dir, arch.Options{})
		return err
	}, a, b)
}

// TestRegistry loads a checkpoint through arch.Load and checks the
// multi-token-prediction layer is skipped with one note.
func TestRegistry(t *testing.T) {
	dir, _ := structModel(t, "a")
	var notes []string
	r, err := arch.Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16, Device: "cpu",
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
	for name := range structShapes {
		dir, cases := structModel(t, name)
		modeltest.GraphDecodeIdenticalIn(t, dir, cases, Load)
	}
}

// TestPrefixCacheIdentical caches a prompt's full pages, attaches them to a
// second request with the same prefix and checks its logits are
// bit-identical to a run without the cache.
func TestPrefixCacheIdentical(t *testing.T) {
	dir, cases := structModel(t, "a")
	r := loadStruct(t, dir)
	ids := cases[1].PromptIDs
	want := modeltest.Forward(t, r, 0, ids, true)
	pc, ok := model.As[model.PrefixCache](r.Runner)
	if !ok {
		t.Fatal("no prefix cache")
	}
	if err := pc.CachePrefix(0, 0, ids); err != nil {
		t.Fatal(err)
	}
	r.Free(0)
	got, err := pc.MatchPrefix(1, 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	if got == 0 || got%16 != 0 {
		t.Fatalf("matched %d tokens", got)
	}
	rows := modeltest.Forward(t, r, 1, ids[got:], true)
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
// $KT_SYNTH_OUT with $KT_SYNTH_LAYERS layers (default 8; the first dense, the
// rest MoE, when fewer than the model's 61) for the decode benchmark;
// skipped unless KT_SYNTH_OUT is set.
func TestMakeSynthetic(t *testing.T) { makeSynthetic(t, "DeepSeek-V3", DeepSeekV3) }

// TestMakeSyntheticKimiK2 is TestMakeSynthetic at Kimi-K2's shape.
func TestMakeSyntheticKimiK2(t *testing.T) { makeSynthetic(t, "Kimi-K2", KimiK2) }

func makeSynthetic(t *testing.T, what string, shape SynthShape) {
	modeltest.MakeSynthetic(t, what, func(dir string, layers int) error {
		s := shape
		if layers < s.Layers {
			s.DenseLayers = 1
		}
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
		{Fixture: "synthetic-qproj", Dir: qproj, Cases: cases, Size: 2, Deferral: 1}, // rank 0 defers; its output broadcast
		{Fixture: "synthetic-qlora", Dir: qlora, Cases: cases, Size: 4, Device: three},
		{Fixture: "synthetic-qlora", Dir: qlora, Cases: cases, Size: 3, Refusal: "num_attention_heads: 4 does not divide over tensor-parallel size 3"},
	})
}
