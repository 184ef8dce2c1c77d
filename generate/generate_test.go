package generate

import (
	"math"
	"slices"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/qwen3moe"
	"github.com/ktserve/kt/internal/fixtures"
)

func fixture(t *testing.T, name string) (*qwen3moe.Runner, []fixtures.Case) {
	t.Helper()
	r, err := qwen3moe.Load(fixtures.Dir(name), arch.Options{MaxSeqs: 2, MaxTotalTokens: 1024, MaxBatchTokens: 64, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, fixtures.Load(t, name)
}

// TestGreedyMatchesReference generates freely (no teacher forcing) and
// checks tokens and logprobs against transformers up to the first step
// whose reference top-2 margin is too small to decide.
func TestGreedyMatchesReference(t *testing.T) {
	for _, fx := range []string{"qwen3moe-a", "qwen3moe-b", "qwen3moe-c"} {
		r, cases := fixture(t, fx)
		for ci, c := range cases {
			res, err := Run(r, c.PromptIDs, Params{MaxNewTokens: len(c.GreedyIDs), IgnoreEOS: true, PromptLogprobs: true, TopLogprobs: 3, ChunkSize: 37})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Output) != len(c.GreedyIDs) || res.Finish != "length" {
				t.Fatalf("%s case %d: %d tokens, finish %s", fx, ci, len(res.Output), res.Finish)
			}
			for i := 1; i < len(c.PromptIDs); i++ {
				if d := math.Abs(*res.PromptLogprobs[i] - *c.PromptLogprobs[i]); d > 1e-3 {
					t.Errorf("%s case %d: prompt logprob %d off by %g", fx, ci, i, d)
				}
			}
			for s, tok := range res.Output {
				if tok.ID != c.GreedyIDs[s] {
					t.Fatalf("%s case %d step %d: token %d, reference %d (margin %g)", fx, ci, s, tok.ID, c.GreedyIDs[s], c.Top2Margin[s])
				}
				if d := math.Abs(tok.Logprob - c.GreedyLogprobs[s]); d > 1e-3 {
					t.Errorf("%s case %d step %d: logprob off by %g", fx, ci, s, d)
				}
				if len(tok.Top) != 3 || tok.Top[0].ID != tok.ID {
					t.Errorf("%s case %d step %d: top logprobs %v", fx, ci, s, tok.Top)
				}
				if c.Top2Margin[s] <= 1e-3 {
					break // later tokens may legitimately diverge
				}
			}
		}
	}
}

func TestSamplingDeterministicAndRestricted(t *testing.T) {
	r, cases := fixture(t, "qwen3moe-a")
	prompt := cases[0].PromptIDs
	p := Params{MaxNewTokens: 12, Temperature: 1, TopP: 0.9, Seed: 7, IgnoreEOS: true}
	a, err := Run(r, prompt, p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(r, prompt, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.OutputIDs(), b.OutputIDs()) {
		t.Fatalf("same seed, different outputs: %v %v", a.OutputIDs(), b.OutputIDs())
	}
	// without logprobs: the same draws, no logprob
	p.NoLogprobs = true
	c, err := Run(r, prompt, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.OutputIDs(), c.OutputIDs()) {
		t.Fatalf("NoLogprobs changed the draws: %v %v", c.OutputIDs(), a.OutputIDs())
	}
	for i, tok := range c.Output {
		if tok.Logprob != 0 || a.Output[i].Logprob >= 0 {
			t.Fatalf("token %d: logprob %v with NoLogprobs, %v without", i, tok.Logprob, a.Output[i].Logprob)
		}
	}
	greedy, err := Run(r, prompt, Params{MaxNewTokens: 12, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	topk1, err := Run(r, prompt, Params{MaxNewTokens: 12, Temperature: 1.5, TopK: 1, Seed: 3, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(greedy.OutputIDs(), topk1.OutputIDs()) {
		t.Fatalf("top-k 1 %v differs from greedy %v", topk1.OutputIDs(), greedy.OutputIDs())
	}
	if _, err := Run(r, nil, Params{}); err == nil {
		t.Fatal("empty prompt accepted")
	}
	if _, err := Run(r, prompt, Params{TopP: 2}); err == nil {
		t.Fatal("top-p 2 accepted")
	}
}

func TestStopsAtEOS(t *testing.T) {
	r, cases := fixture(t, "qwen3moe-a")
	c := cases[0]
	// make the first greedy token look like EOS: run with IgnoreEOS false
	// and check the finish reason only when EOS is actually produced.
	res, err := Run(r, c.PromptIDs, Params{MaxNewTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	eos := r.Info().EOSTokenIDs
	last := res.Output[len(res.Output)-1].ID
	if slices.Contains(eos, last) != (res.Finish == "stop") {
		t.Fatalf("finish %q with last token %d (eos %v)", res.Finish, last, eos)
	}
	for _, tok := range res.Output[:len(res.Output)-1] {
		if slices.Contains(eos, tok.ID) {
			t.Fatalf("generation ran past EOS %d", tok.ID)
		}
	}
}
