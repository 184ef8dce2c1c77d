// Package generate runs one prompt through a model.Runner offline: chunked
// prefill, then decode with greedy or temperature/top-k/top-p sampling
// (the engine's sampler, engine/sample), recording each output token's
// logprob and the top-N alternatives. It is what `kt generate` and the model
// tests drive; the server uses the engine's scheduler instead.
package generate

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/internal/vecmath"
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
	Slot           int     // runner slot to use (freed afterwards)
	// NoLogprobs leaves each sampled token's Logprob 0: one pass over the
	// vocabulary less per token (kt generate without --json prints ids
	// only). Greedy picks still carry theirs, which cost nothing extra.
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
	PrefillSeconds float64    `json:"prefill_seconds"`
	DecodeSeconds  float64    `json:"decode_seconds"` // after the first token
	// DecodeHostSeconds is the part of DecodeSeconds spent outside the
	// runner's Forward: picking each token, its logprob and alternatives,
	// reserving its KV slot.
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

// Run generates from prompt on runner slot p.Slot.
func Run(r model.Runner, prompt []int32, p Params) (*Result, error) {
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt")
	}
	if p.MaxNewTokens < 0 || p.Temperature < 0 || p.TopP < 0 || p.TopP > 1 || p.TopK < 0 || p.TopLogprobs < 0 {
		return nil, fmt.Errorf("generate: invalid parameters %+v", p)
	}
	if p.ChunkSize <= 0 {
		p.ChunkSize = 512
	}
	info := r.Info()
	eos := map[int32]bool{}
	for _, e := range info.EOSTokenIDs {
		eos[e] = !p.IgnoreEOS
	}
	res := &Result{PromptIDs: prompt, Finish: "length"}
	if p.PromptLogprobs {
		res.PromptLogprobs = make([]*float64, len(prompt))
	}
	r.Free(p.Slot)
	defer r.Free(p.Slot)
	topP := p.TopP
	if topP == 0 {
		topP = 1
	}
	seq := sample.NewSequence(sample.Params{Temperature: p.Temperature, TopP: topP, TopK: p.TopK, RepetitionPenalty: 1}, prompt, p.Seed)
	var sm sample.Sampler
	var out model.Logits
	var last []float32
	start := time.Now()
	for i := 0; i < len(prompt); i += p.ChunkSize {
		chunk := prompt[i:min(i+p.ChunkSize, len(prompt))]
		if err := r.Reserve(p.Slot, len(chunk)); err != nil {
			return nil, fmt.Errorf("generate: prompt of %d tokens: %w", len(prompt), err)
		}
		b := model.Batch{Chunks: []model.Chunk{{Slot: p.Slot, Pos: i, Tokens: chunk, AllLogits: p.PromptLogprobs}}}
		if err := r.Forward(&b, &out); err != nil {
			return nil, fmt.Errorf("generate: prefill at %d: %w", i, err)
		}
		rows := out.Rows[0]
		if p.PromptLogprobs {
			for j, row := range rows {
				if k := i + j + 1; k < len(prompt) {
					lp := sample.LogSoftmax(row, nil)[prompt[k]]
					res.PromptLogprobs[k] = &lp
				}
			}
		}
		last = rows[len(rows)-1]
	}
	res.PrefillSeconds = time.Since(start).Seconds()
	start = time.Now()
	pos := len(prompt)
	// plain greedy decoding (no penalty, ban or constraint: Params has
	// none) picks what the sampler's greedy path would, without its copy
	// of the row and its scalar scan (greedyPick)
	greedy := seq.Greedy()
	// without top logprobs a decode step needs only the pick, which a GPU
	// runner makes beside the logits (model.Chunk.PickOnly): greedy, or
	// drawn (model.Chunk.Draw) with the uniform value the sequence's stream
	// gives next, so that the host's draw, should the runner hand the row
	// back, takes the same value (u)
	pickOnly := p.TopLogprobs == 0 && seq.Plain()
	var pick model.Pick // the runner's pick for the last step, if it made one (picked)
	picked := false
	u := -1.0 // the value taken for the last step's draw, if one was
	var host time.Duration
	for n := 0; n < p.MaxNewTokens; n++ {
		th := time.Now()
		// one pass over the vocabulary (the engine's way), not a float64
		// log-softmax of every entry: at batch 1 on the GPU that pass is
		// host time between two decode steps
		var id int32
		var mx, lse float64
		var err error
		switch {
		case picked:
			id = pick.ID
			if id < 0 {
				err = sample.ErrNoToken
			}
		case greedy:
			id, mx, lse, err = greedyPick(last)
		default:
			if !p.NoLogprobs || p.TopLogprobs > 0 {
				mx, lse = sample.LogSumExp(last)
			}
			if u >= 0 {
				id, err = sm.SampleAt(seq, last, u)
			} else {
				id, err = sm.Sample(seq, last)
			}
		}
		lp := func(id int32) float64 { return float64(last[id]) - mx - lse }
		if err != nil {
			return nil, fmt.Errorf("generate: at %d tokens: %w", pos, err)
		}
		seq.Accept(id)
		t := Token{ID: id, Logprob: pick.Logprob}
		if !picked && (greedy || !p.NoLogprobs) {
			t.Logprob = lp(id)
		}
		if p.TopLogprobs > 0 {
			for _, c := range sm.Largest(last, p.TopLogprobs) {
				t.Top = append(t.Top, TokenLogprob{ID: c, Logprob: lp(c)})
			}
		}
		res.Output = append(res.Output, t)
		if n == 0 {
			start = time.Now()
		}
		if eos[id] {
			res.Finish = "stop"
			break
		}
		if n+1 == p.MaxNewTokens {
			break
		}
		if err := r.Reserve(p.Slot, 1); err != nil {
			return nil, fmt.Errorf("generate: at %d tokens: %w", pos, err)
		}
		if n > 0 { // the first token's time is not in DecodeSeconds
			host += time.Since(th)
		}
		ch := model.Chunk{Slot: p.Slot, Pos: pos, Tokens: []int32{id}, PickOnly: pickOnly}
		if pickOnly && !greedy {
			ch.Draw = seq.NextDraw()
			u = ch.Draw.U
		}
		b := model.Batch{Chunks: []model.Chunk{ch}}
		if err := r.Forward(&b, &out); err != nil {
			return nil, fmt.Errorf("generate: decode at %d: %w", pos, err)
		}
		pos++
		if picked = len(out.Picks) > 0; picked {
			pick, last = out.Picks[0], nil
		} else {
			last = out.Rows[0][0]
		}
	}
	res.DecodeSeconds = time.Since(start).Seconds()
	res.DecodeHostSeconds = host.Seconds()
	return res, nil
}

// greedyPick returns the greedy sampler's pick from a logits row — the
// first index of the largest value, NaNs skipped; sample.ErrNoToken when
// every value is -Inf or NaN — and sample.LogSumExp's results, from the
// same maximum: one vectorised pass for the maximum, a scan that stops at
// its first occurrence and one for the sum of exponentials. The row is
// not copied (the sampler copies it to apply penalties, which plain greedy
// decoding has none of).
func greedyPick(row []float32) (id int32, mx, lse float64, err error) {
	m := vecmath.Max(row)
	if math.IsInf(float64(m), -1) || len(row) == 0 {
		return 0, 0, 0, sample.ErrNoToken
	}
	id = -1
	for i, v := range row {
		if v == m {
			id = int32(i)
			break
		}
	}
	if id < 0 { // unreachable: m is an element of row
		return 0, 0, 0, sample.ErrNoToken
	}
	return id, float64(m), math.Log(vecmath.SumExpShifted(row, m)), nil
}
