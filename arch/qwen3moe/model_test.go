package qwen3moe

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/moe/placement"
)

// fixtures are the transformers reference checkpoints (testdata/models).
var fixtures = []string{"qwen3moe-a", "qwen3moe-b", "qwen3moe-c", "qwen3moe-fp8-a", "qwen3moe-fp8-b", "qwen3moe-trained"}

var fixtureDir = modeltest.FixtureDir

// testRunner lets modeltest read slot lengths.
type testRunner struct{ *Runner }

func (r testRunner) SlotLen(slot int) int { return r.rb.Pool.Len(slot) }

func load(t *testing.T, name string, simd bool) testRunner {
	t.Helper()
	return testRunner{modeltest.LoadFixture(t, name, simd, "backend", Load)}
}

// TestMatchesTransformers checks every prompt logprob and, teacher-forcing
// the reference's greedy continuation through the KV cache, every greedy
// token (where the reference's top-2 margin exceeds 1e-3), its logprob and
// the top-8 logprobs, for the SIMD and the portable kernels.
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
	modeltest.RejectsBadBatches(t, load(t, "qwen3moe-a", true))
}

func TestLoadErrors(t *testing.T) {
	modeltest.LoadErrors(t, func(dir string) error {
		_, err := Load(dir, arch.Options{})
		return err
	}, "qwen3moe-a", "qwen3moe-b")
}

func TestRegistry(t *testing.T) {
	r, err := arch.Load(fixtureDir("qwen3moe-b"), arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info := r.Info(); info.Architecture != Architecture || info.VocabSize != 1000 || len(info.EOSTokenIDs) == 0 {
		t.Fatalf("info %+v", info)
	}
}

// TestGraphDecodeIdentical checks the decode graph path against op-by-op
// steps, bit for bit (modeltest.GraphDecodeIdentical).
func TestGraphDecodeIdentical(t *testing.T) {
	modeltest.GraphDecodeIdentical(t, "qwen3moe-a", Load)
}

// TestTensorParallel runs every fixture over 2 and 4 CPU ranks against one
// rank (modeltest.TPMatchesSingle), on the reference MoE op and the CPU
// expert engine, with device experts split over the ranks, with expert
// deferral, and a size the heads do not divide.
func TestTensorParallel(t *testing.T) {
	var cases []modeltest.TPCase
	for _, fx := range fixtures {
		cases = append(cases, modeltest.TPCase{Fixture: fx, Size: 2}, modeltest.TPCase{Fixture: fx, Size: 4})
	}
	// 6 of 16 experts per layer on the device: shares of 2, 2, 1, 1 over 4 ranks
	six := placement.Request{PerLayer: 6}
	// half of all experts from the first layer: layer 0 wholly on the
	// device, layer 1 half, layer 2 on the CPU expert engine alone
	front := placement.Request{Ratio: 0.5, RatioSet: true, Strategy: placement.FrontLoading}
	cases = append(cases,
		// rank 0's CPU expert engine serves every rank
		modeltest.TPCase{Fixture: "qwen3moe-trained", Size: 2, Experts: "auto"},
		modeltest.TPCase{Fixture: "qwen3moe-trained", Size: 4, Experts: "auto"},
		modeltest.TPCase{Fixture: "qwen3moe-b", Size: 2, Device: six},
		modeltest.TPCase{Fixture: "qwen3moe-b", Size: 4, Device: six},
		modeltest.TPCase{Fixture: "qwen3moe-trained", Size: 2, Experts: "auto", Device: front},
		modeltest.TPCase{Fixture: "qwen3moe-trained", Size: 4, Experts: "auto", Device: front},
		// expert deferral on rank 0's engine (and on the reference op,
		// where the device experts, split over the ranks, are never
		// deferred): the deferred output joins the next MoE layer on rank
		// 0 before its Broadcast or all-reduce
		modeltest.TPCase{Fixture: "qwen3moe-trained", Size: 2, Experts: "auto", Deferral: 1},
		modeltest.TPCase{Fixture: "qwen3moe-trained", Size: 4, Experts: "auto", Deferral: 2},
		modeltest.TPCase{Fixture: "qwen3moe-trained", Size: 2, Experts: "auto", Device: front, Deferral: 2},
		modeltest.TPCase{Fixture: "qwen3moe-b", Size: 4, Device: six, Deferral: 1},
		modeltest.TPCase{Fixture: "qwen3moe-a", Size: 3, Refusal: "num_attention_heads: 4 does not divide over tensor-parallel size 3"})
	modeltest.TPMatchesSingle(t, cases)
}
