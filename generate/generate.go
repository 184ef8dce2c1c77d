// Package generate runs one prompt to completion offline on the engine's
// scheduler (package engine, the loop kt serve uses: chunked prefill, the
// same sampling and stop handling) and collects what `kt generate` prints:
// the output tokens with their logprobs and top-N alternatives, the prompt
// logprobs, and prefill and decode timings.
package generate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/model"
)

// Params controls one generation.
type Params struct {
	MaxNewTokens   int     // tokens to generate (>= 0)
	Temperature    float64 // 0 = greedy
	TopP           float64 // nucleus mass in (0,1]; 0 or 1 = off
	TopK           int     // keep the k most likely; 0 = off
	Seed           uint64  // random stream of the sampler
	TopLogprobs    int     // alternatives recorded per output token
	PromptLogprobs bool    // also score every prompt token
	IgnoreEOS      bool    // keep going past an EOS token
	ChunkSize      int     // prefill chunk (<= the runner's batch tokens); default 512
	// NoLogprobs leaves each token's Logprob 0: one pass over the
	// vocabulary less per token (kt generate without --json prints ids
	// only).
	NoLogprobs bool
}

// TokenLogprob is a token with its log-probability.
type TokenLogprob struct {
	ID      int32   `json:"id"`
	Logprob float64 `json:"logprob"`
}

// Token is one generated token.
type Token struct {
	ID      int32          `json:"id"`
	Logprob float64        `json:"logprob"`
	Top     []TokenLogprob `json:"top_logprobs,omitempty"`
}

// Result is a finished generation.
type Result struct {
	PromptIDs      []int32    `json:"prompt_ids"`
	PromptLogprobs []*float64 `json:"prompt_logprobs,omitempty"` // [0] is null
	Output         []Token    `json:"output"`
	Finish         string     `json:"finish_reason"` // "length" or "stop"
	// PrefillSeconds runs from submitting the prompt to its first output
	// token.
	PrefillSeconds float64 `json:"prefill_seconds"`
	DecodeSeconds  float64 `json:"decode_seconds"` // after the first token
	// DecodeHostSeconds is the part of DecodeSeconds spent outside the
	// runner's forward passes: scheduling, picking each token, its
	// logprob and alternatives, reserving its KV slot.
	DecodeHostSeconds float64 `json:"decode_host_seconds"`
}

// OutputIDs lists the generated token ids.
func (r *Result) OutputIDs() []int32 {
	ids := make([]int32, len(r.Output))
	for i, t := range r.Output {
		ids[i] = t.ID
	}
	return ids
}

// Session is an engine with one sequence slot and no prefix cache over a
// runner, for generations run one after another without starting an engine
// for each.
type Session struct {
	e    *engine.Engine
	ctx  context.Context
	stop context.CancelFunc
}

// NewSession starts a session on r, which must hold no sequence; prefill
// runs in chunks of chunk tokens (512 when chunk <= 0). Close stops it.
func NewSession(r model.Runner, chunk int) (*Session, error) {
	if chunk <= 0 {
		chunk = 512
	}
	e, err := engine.New(r, engine.Config{MaxRunningRequests: 1, ChunkedPrefillSize: chunk, MaxPrefillTokens: chunk, DisableRadixCache: true})
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	go e.Run(ctx) //nolint:errcheck // a runner failure ends the sequence with its error
	return &Session{e: e, ctx: ctx, stop: stop}, nil
}

// Close stops the session's engine and waits for it.
func (s *Session) Close() {
	s.stop()
	<-s.e.Done()
}

// Run generates from prompt (p.ChunkSize is the session's).
func (s *Session) Run(prompt []int32, p Params) (*Result, error) {
	req, err := p.request(prompt)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	st, err := s.e.Submit(s.ctx, req)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	res, err := collect(s.ctx, st, start, p)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	res.PromptIDs = prompt
	return res, nil
}

// Run generates from prompt on r, which must hold no sequence, in a
// session of its own.
func Run(r model.Runner, prompt []int32, p Params) (*Result, error) {
	s, err := NewSession(r, p.ChunkSize)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Run(prompt, p)
}

// request checks p and makes the engine's request for prompt.
func (p Params) request(prompt []int32) (engine.Request, error) {
	if len(prompt) == 0 {
		return engine.Request{}, errors.New("generate: empty prompt")
	}
	if p.MaxNewTokens < 0 || p.Temperature < 0 || p.TopP < 0 || p.TopP > 1 || p.TopK < 0 || p.TopLogprobs < 0 {
		return engine.Request{}, fmt.Errorf("generate: invalid parameters %+v", p)
	}
	sp := engine.DefaultSamplingParams()
	sp.Temperature, sp.TopK = p.Temperature, p.TopK
	if p.TopP > 0 {
		sp.TopP = p.TopP
	}
	sp.Seed, sp.HasSeed = p.Seed, true
	// the engine takes 0 for "up to the context length": with none asked
	// for, one token is drawn and dropped (collect)
	sp.MaxNewTokens = max(p.MaxNewTokens, 1)
	sp.IgnoreEOS = p.IgnoreEOS
	sp.Logprobs = !p.NoLogprobs
	sp.TopLogprobs = p.TopLogprobs
	sp.PromptLogprobs = p.PromptLogprobs
	return engine.Request{ID: "generate", Prompt: prompt, Params: sp}, nil
}

// collect reads st to its end and converts what it delivers into a Result
// (all but PromptIDs), timing the prefill from start to the first token and
// the decode from there to the last.
func collect(ctx context.Context, st *engine.Stream, start time.Time, p Params) (*Result, error) {
	res := &Result{}
	var first time.Time
	for {
		u, err := st.Next(ctx)
		if err != nil {
			return nil, err
		}
		if len(u.Tokens) > 0 && first.IsZero() {
			first = time.Now()
			res.PrefillSeconds = first.Sub(start).Seconds()
		}
		for _, t := range u.Tokens {
			res.Output = append(res.Output, token(t))
		}
		if u.PromptLogprobs != nil {
			res.PromptLogprobs = make([]*float64, 1, len(u.PromptLogprobs)+1)
			for _, lp := range u.PromptLogprobs {
				v := float64(lp.Logprob)
				res.PromptLogprobs = append(res.PromptLogprobs, &v)
			}
		}
		if f := u.Finish; f != nil {
			if f.Err != nil || f.Reason == engine.FinishAbort {
				return nil, fmt.Errorf("after %d tokens: %w", len(res.Output), abortCause(f.Err))
			}
			if !first.IsZero() {
				res.DecodeSeconds = time.Since(first).Seconds()
				res.DecodeHostSeconds = max(res.DecodeSeconds-f.DecodeStepTime.Seconds(), 0)
			}
			res.Finish = string(f.Reason)
			if p.MaxNewTokens == 0 {
				res.Output, res.Finish = nil, string(engine.FinishLength)
			}
			return res, nil
		}
	}
}

// abortCause is err, or a plain cause for an abort without one.
func abortCause(err error) error {
	if err == nil {
		return errors.New("the engine aborted the sequence")
	}
	return err
}

// token converts an engine token to the Result's form.
func token(t engine.Token) Token {
	out := Token{ID: t.ID, Logprob: float64(t.Logprob)}
	for _, c := range t.Top {
		out.Top = append(out.Top, TokenLogprob{ID: c.ID, Logprob: float64(c.Logprob)})
	}
	return out
}
