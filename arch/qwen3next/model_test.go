package qwen3next

import (
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/moe/placement"
)

// fixtures are the transformers reference checkpoints (testdata/models).
var fixtures = []string{"qwen3next-a", "qwen3next-b", "qwen35moe-a", "qwen35moe-b", "qwen35moe-fp8"}

var fixtureDir = modeltest.FixtureDir

// testRunner lets modeltest read slot lengths.
type testRunner struct{ *Runner }

func (r testRunner) SlotLen(slot int) int { return r.rb.Pool.Len(slot) }

func load(t *testing.T, name string, simd bool) testRunner {
	t.Helper()
	return testRunner{modeltest.LoadFixture(t, name, simd, "", Load)}
}

// TestMatchesTransformers checks every prompt logprob and, teacher-forcing
// the reference's greedy continuation through the KV cache, every greedy
// token (where the reference's top-2 margin exceeds 1e-3), its logprob and
// the top-8 logprobs, for the SIMD and the portable kernels.
func TestMatchesTransformers(t *testing.T) {
	// The portable kernels are slow under -race; one fixture of each
	// family covers them (backend/cpu tests them op by op).
	modeltest.MatchesTransformersAll(t, fixtures, func(fx string) bool { return !strings.HasSuffix(fx, "-b") }, func(t *testing.T, fx string, simd bool) modeltest.Runner {
		return load(t, fx, simd)
	})
}

// TestChunkedPrefillIdentical prefills the longest prompt in chunks of
// several sizes and checks the logits are bit-identical to one prefill.
func TestChunkedPrefillIdentical(t *testing.T) {
	for _, fx := range fixtures {
		modeltest.ChunkedPrefillIdentical(t, load(t, fx, true), fx, 150, []int{1, 5, 17, 63, 64, 65, 100})
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
	modeltest.RejectsBadBatches(t, load(t, "qwen3next-a", true))
}

func TestLoadErrors(t *testing.T) {
	modeltest.LoadErrors(t, func(dir string) error {
		_, err := Load(dir, arch.Options{})
		return err
	}, "qwen3next-a", "qwen3next-b")
}

func TestRegistry(t *testing.T) {
	for fx, name := range map[string]string{"qwen3next-a": ArchNext, "qwen35moe-a": ArchQwen35, "qwen35moe-b": ArchQwen35Text} {
		r, err := arch.Load(fixtureDir(fx), arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16})
		if err != nil {
			t.Fatal(err)
		}
		if info := r.Info(); info.Architecture != name || info.VocabSize != 1000 || len(info.EOSTokenIDs) == 0 {
			t.Errorf("%s: info %+v", fx, info)
		}
		r.Close()
	}
}

// TestFreedSlotStartsFresh checks that a freed slot's linear-attention state
// does not leak into the next sequence, and that state slots are bounded by
// the number of sequence slots and reused.
func TestFreedSlotStartsFresh(t *testing.T) {
	r := load(t, "qwen35moe-a", true)
	cases := modeltest.ReadRef(t, "qwen35moe-a")
	a, b := cases[0].PromptIDs, cases[1].PromptIDs
	want := modeltest.Forward(t, r, 0, b, true)
	r.Free(0)
	modeltest.Forward(t, r, 0, a, true)
	r.Free(0)
	modeltest.RequireIdentical(t, "after free", modeltest.Forward(t, r, 0, b, true), want)
	if r.LinearStateBytes() <= 0 {
		t.Fatal("no linear state accounted")
	}
}

// TestGraphDecodeIdentical checks the decode graph path (padding to batch
// buckets, capture, replay, re-capture) against op-by-op steps, bit for bit,
// on the CPU backend with graph semantics (modeltest.FakeGraphs).
func TestGraphDecodeIdentical(t *testing.T) {
	for _, fx := range []string{"qwen3next-a", "qwen35moe-a"} {
		t.Run(fx, func(t *testing.T) { modeltest.GraphDecodeIdentical(t, fx, Load) })
	}
}

// TestTensorParallel runs every fixture over 2 and 4 CPU ranks against one
// rank (modeltest.TPMatchesSingle): attention heads and Gated DeltaNet
// heads with their conv and recurrent state split over the ranks; where
// the key heads do not divide, the refusal; with device experts and with
// expert deferral.
func TestTensorParallel(t *testing.T) {
	modeltest.TPMatchesSingle(t, []modeltest.TPCase{
		{Fixture: "qwen3next-a", Size: 2},
		{Fixture: "qwen3next-a", Size: 4, Refusal: "linear_num_key_heads: 2 does not divide over tensor-parallel size 4"},
		{Fixture: "qwen3next-b", Size: 2},
		{Fixture: "qwen3next-b", Size: 4},
		{Fixture: "qwen35moe-a", Size: 2},
		{Fixture: "qwen35moe-a", Size: 4, Refusal: "linear_num_key_heads: 2 does not divide over tensor-parallel size 4"},
		{Fixture: "qwen35moe-b", Size: 2},
		{Fixture: "qwen35moe-b", Size: 4},
		{Fixture: "qwen35moe-fp8", Size: 2},
		{Fixture: "qwen35moe-fp8", Size: 4, Refusal: "linear_num_key_heads: 2 does not divide over tensor-parallel size 4"},
		// device experts split over the ranks, summed with the shared
		// expert's shards: a random placement (per layer 1 to 6 of 8), and
		// 3 per layer over 4 ranks (the last rank's share empty)
		{Fixture: "qwen3next-b", Size: 2, Device: placement.Request{Ratio: 0.4, RatioSet: true, Strategy: placement.Random}},
		{Fixture: "qwen35moe-b", Size: 4, Device: placement.Request{PerLayer: 3}},
		// expert deferral on rank 0, its deferred output added before the
		// all-reduce with the shared expert's shards (and the device
		// experts' shares, never deferred)
		{Fixture: "qwen35moe-b", Size: 2, Deferral: 1},
		{Fixture: "qwen35moe-b", Size: 4, Device: placement.Request{PerLayer: 3}, Deferral: 2},
	})
	// the same on rank 0's CPU expert engine: a synthetic Qwen3.5 model
	// of hidden 128, which the engine serves
	dir, shape := writeEngineSynth(t, 3)
	c := modeltest.Case{Name: "synthetic", GreedyIDs: make([]int32, 4)}
	for j := range 12 {
		c.PromptIDs = append(c.PromptIDs, int32((j*53+1)%shape.Vocab))
	}
	modeltest.TPMatchesSingle(t, []modeltest.TPCase{
		{Fixture: "synthetic", Dir: dir, Cases: []modeltest.Case{c}, Size: 2, Experts: "BF16", Deferral: 1},
	})
}
