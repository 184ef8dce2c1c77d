package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/internal/fakemodel"
)

// refLogprobs computes log_softmax of the fake model's row after toks.
func refLogprobs(r *fakemodel.Runner, toks []int32) []float64 {
	row := make([]float32, 300)
	r.Logits(toks, row)
	return sample.LogSoftmax(row, nil)
}

func TestPromptScoring(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{})
	ids := []int32{7, 0, 299}
	for _, tc := range []struct {
		name  string
		chunk int
		p     SamplingParams
	}{
		{"prompt only", 5, SamplingParams{PromptOnly: true}},
		{"prompt only, unchunked", 0, SamplingParams{PromptOnly: true}},
		{"with output", 7, SamplingParams{MaxNewTokens: 4, Logprobs: true, TopLogprobs: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEngine(t, r, Config{ChunkedPrefillSize: tc.chunk})
			p := greedy(tc.p.MaxNewTokens)
			p.PromptOnly, p.Logprobs, p.TopLogprobs = tc.p.PromptOnly, tc.p.Logprobs, tc.p.TopLogprobs
			p.PromptLogprobs, p.PromptTopLogprobs, p.TokenIDsLogprob = true, 3, ids
			pr := prompt(3, 17)
			s, err := e.Submit(context.Background(), Request{Prompt: pr, Params: p})
			if err != nil {
				t.Fatal(err)
			}
			var up Update
			var toks []Token
			ctx := context.Background()
			for {
				u, err := s.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if u.PromptLogprobs != nil {
					up = u
				}
				toks = append(toks, u.Tokens...)
				if u.Finish != nil {
					if p.PromptOnly && (len(toks) != 0 || u.Finish.Reason != FinishLength || u.Finish.OutputTokens != 0) {
						t.Fatalf("prompt only: %d tokens, finish %+v", len(toks), u.Finish)
					}
					break
				}
			}
			if len(up.PromptLogprobs) != len(pr)-1 || len(up.PromptTop) != len(pr)-1 || len(up.PromptIDs) != len(pr)-1 {
				t.Fatalf("%d logprobs, %d tops, %d id lists for a %d-token prompt", len(up.PromptLogprobs), len(up.PromptTop), len(up.PromptIDs), len(pr))
			}
			for j := range up.PromptLogprobs {
				ref := refLogprobs(r, pr[:j+1])
				if got := up.PromptLogprobs[j]; got.ID != pr[j+1] || math.Abs(float64(got.Logprob)-ref[pr[j+1]]) > 1e-4 {
					t.Errorf("position %d: %+v, want logprob %v", j+1, got, ref[pr[j+1]])
				}
				top := up.PromptTop[j]
				if len(top) != 3 || top[0].Logprob < top[1].Logprob || top[1].Logprob < top[2].Logprob {
					t.Errorf("position %d top %+v", j+1, top)
				}
				for _, x := range top {
					if math.Abs(float64(x.Logprob)-ref[x.ID]) > 1e-4 {
						t.Errorf("position %d top %+v, want logprob %v", j+1, x, ref[x.ID])
					}
				}
				if best := slices.Index(ref, slices.Max(ref)); top[0].ID != int32(best) {
					t.Errorf("position %d: best %d, want %d", j+1, top[0].ID, best)
				}
				for k, x := range up.PromptIDs[j] {
					if x.ID != ids[k] || math.Abs(float64(x.Logprob)-ref[ids[k]]) > 1e-4 {
						t.Errorf("position %d id %d: %+v, want logprob %v", j+1, k, x, ref[ids[k]])
					}
				}
			}
			all := slices.Clone(pr)
			for i, tk := range toks {
				ref := refLogprobs(r, all)
				if len(tk.IDs) != len(ids) {
					t.Fatalf("token %d: %d id logprobs", i, len(tk.IDs))
				}
				for k, x := range tk.IDs {
					if x.ID != ids[k] || math.Abs(float64(x.Logprob)-ref[ids[k]]) > 1e-4 {
						t.Errorf("token %d id %d: %+v, want logprob %v", i, k, x, ref[ids[k]])
					}
				}
				all = append(all, tk.ID)
			}
		})
	}
}

func TestLogitBias(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{})
	e := startEngine(t, r, Config{})
	pr := prompt(4, 9)
	run := func(p SamplingParams) []Token {
		t.Helper()
		s, err := e.Submit(context.Background(), Request{Prompt: pr, Params: p})
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, s).tokens
	}
	base := run(greedy(6))
	// +100 forces a token the model gives little weight.
	p := greedy(6)
	p.Logprobs = true
	p.LogitBias = map[int32]float32{42: 100}
	for i, tk := range run(p) {
		if tk.ID != 42 {
			t.Fatalf("token %d is %d with +100 on 42", i, tk.ID)
		}
		// Logprobs stay those of the model's distribution.
		if tk.Logprob > -0.5 {
			t.Errorf("token %d logprob %v: the bias leaked into the reported logprob", i, tk.Logprob)
		}
	}
	// -100 bans the greedy choice; sampled draws avoid it too.
	for _, temp := range []float64{0, 1} {
		p = greedy(6)
		p.Temperature = temp
		p.Seed, p.HasSeed = 5, true
		p.LogitBias = map[int32]float32{base[0].ID: -100}
		got := run(p)
		if got[0].ID == base[0].ID {
			t.Errorf("temperature %v: banned token %d drawn first", temp, base[0].ID)
		}
	}
	for _, tc := range []struct {
		name string
		p    func(*SamplingParams)
	}{
		{"bias too large", func(p *SamplingParams) { p.LogitBias = map[int32]float32{1: 101} }},
		{"bias NaN", func(p *SamplingParams) { p.LogitBias = map[int32]float32{1: float32(math.NaN())} }},
		{"bias token outside the vocabulary", func(p *SamplingParams) { p.LogitBias = map[int32]float32{300: 1} }},
		{"logprob token outside the vocabulary", func(p *SamplingParams) { p.TokenIDsLogprob = []int32{5, -1} }},
		{"prompt top too large", func(p *SamplingParams) { p.PromptTopLogprobs = 21 }},
	} {
		p := greedy(3)
		tc.p(&p)
		if _, err := e.Submit(context.Background(), Request{Prompt: pr, Params: p}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
