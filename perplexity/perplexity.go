// Package perplexity measures how well a model predicts a text: the mean
// negative log-likelihood (NLL) of its tokens and the perplexity exp(NLL),
// computed through a model.Runner's prompt logprobs (package generate's
// prefill with every position scored).
//
// The convention is tools/train/train_moe.py's held-out evaluation: the
// token ids are cut from the start into non-overlapping windows of Ctx
// tokens (the last may be shorter), each window is run from an empty
// context, and every token of a window but its first is scored given the
// window's tokens before it; a window of one token scores nothing. NLL is
// the sum of -log p over the scored tokens divided by their number.
package perplexity

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ktserve/kt/generate"
	"github.com/ktserve/kt/model"
)

// Options sets how a text is scored.
type Options struct {
	// Ctx is the window length in tokens (at least 2).
	Ctx int
	// Chunk is the prefill chunk in tokens, at most the runner's tokens
	// per step; 0 means generate's default (512).
	Chunk int
}

// Result is a scored text.
type Result struct {
	InputTokens int     `json:"input_tokens"`  // ids given
	Windows     int     `json:"windows"`       // windows scored
	Tokens      int     `json:"scored_tokens"` // tokens scored: InputTokens minus one per window
	Ctx         int     `json:"ctx"`           // window length
	NLL         float64 `json:"nll"`           // mean negative log-likelihood, nats per scored token
	Perplexity  float64 `json:"perplexity"`    // exp(NLL)
	Seconds     float64 `json:"seconds"`       // wall-clock time of the forward passes and scoring
}

// ErrNothingToScore is returned (wrapped) when the ids leave no token to
// score: fewer than two.
var ErrNothingToScore = errors.New("perplexity: fewer than two tokens, nothing to score")

// Windows cuts ids into the non-overlapping windows of ctx tokens the
// convention scores, dropping a last window of a single token. The
// windows alias ids.
func Windows(ids []int32, ctx int) [][]int32 {
	var ws [][]int32
	for i := 0; i < len(ids); i += ctx {
		w := ids[i:min(i+ctx, len(ids))]
		if len(w) >= 2 {
			ws = append(ws, w)
		}
	}
	return ws
}

// Score runs every window of ids through r and returns the text's mean
// NLL and perplexity. r must hold Ctx+1 tokens in one slot (the engine
// reserves room for one output token).
func Score(r model.Runner, ids []int32, o Options) (Result, error) {
	if o.Ctx < 2 {
		return Result{}, fmt.Errorf("perplexity: window of %d tokens: need at least 2", o.Ctx)
	}
	if len(ids) < 2 {
		return Result{}, fmt.Errorf("%w (%d given)", ErrNothingToScore, len(ids))
	}
	if n := r.Info().ContextLen; n > 0 && min(o.Ctx, len(ids)) > n {
		return Result{}, fmt.Errorf("perplexity: window of %d tokens is longer than the model's %d positions", min(o.Ctx, len(ids)), n)
	}
	res := Result{InputTokens: len(ids), Ctx: o.Ctx}
	var sum float64
	start := time.Now()
	gs, err := generate.NewSession(r, o.Chunk)
	if err != nil {
		return Result{}, fmt.Errorf("perplexity: %w", err)
	}
	defer gs.Close()
	for wi, w := range Windows(ids, o.Ctx) {
		g, err := gs.Run(w, generate.Params{PromptLogprobs: true})
		if err != nil {
			return Result{}, fmt.Errorf("perplexity: window %d (tokens %d..%d): %w", wi, wi*o.Ctx, wi*o.Ctx+len(w), err)
		}
		for k, lp := range g.PromptLogprobs[1:] {
			if lp == nil || math.IsNaN(*lp) {
				return Result{}, fmt.Errorf("perplexity: window %d: token %d has no logprob", wi, k+1)
			}
			sum -= *lp
		}
		res.Windows++
		res.Tokens += len(w) - 1
	}
	res.Seconds = time.Since(start).Seconds()
	res.NLL = sum / float64(res.Tokens)
	res.Perplexity = math.Exp(res.NLL)
	return res, nil
}
