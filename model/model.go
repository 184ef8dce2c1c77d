// Package model defines the contract between the engine (scheduler, sampler,
// server) and a model runner (a model definition bound to a backend). The
// engine decides which sequences run in a step and how many tokens each
// advances; the runner owns the weights, the KV cache pages and the recurrent
// state slots, and computes logits.
package model

import "errors"

// ErrOutOfMemory is returned (wrapped) by Runner.Reserve when the KV budget
// cannot hold the requested tokens; the engine then waits or preempts.
var ErrOutOfMemory = errors.New("model: KV cache budget exhausted")

// Info describes a loaded model for the engine and the server.
type Info struct {
	Architecture string // HF architectures string, e.g. "Qwen3MoeForCausalLM"
	VocabSize    int    // rows of the lm head (logits width)
	ContextLen   int    // max positions the model supports
	EOSTokenIDs  []int32
}

// Chunk is one sequence's slice of a forward step: Tokens are appended to the
// sequence in Slot starting at position Pos (the number of tokens already in
// its cache). Prefill chunks, whole prompts and single decode tokens are all
// Chunks; one Batch may mix them.
type Chunk struct {
	Slot   int     // sequence slot, 0 <= Slot < MaxSeqs given at load time
	Pos    int     // position of Tokens[0]; must equal the slot's cached length
	Tokens []int32 // new tokens, at least one
	// AllLogits asks for logits at every token of the chunk (prompt
	// logprobs); otherwise only the last token's logits are returned.
	AllLogits bool
	// Adapter is the LoRA adapter id the chunk's request asked for (0:
	// the base model; lora.Set.Index).
	Adapter int
	// PickOnly says the caller needs only the pick of the chunk's last
	// row: the greedy one, or the draw Draw describes. When every chunk of
	// a step says so, a runner that can pick where the logits are (on the
	// GPU) returns Logits.Picks instead of the rows; others return the
	// rows as usual, and the caller draws with the same settings.
	PickOnly bool
	// Draw is the sampled pick's settings when PickOnly (the zero value:
	// greedy).
	Draw Draw
}

// Draw says how a runner picks a token from a logits row in the caller's
// stead (model.Chunk.Draw), as engine/sample's Sampler.SampleAt does for a
// sequence with no penalty, constraint or ban: greedy when Temperature is
// below 1e-5 or TopK is 1; otherwise the probabilities softmax(logits /
// Temperature) are filtered (TopK > 0: the TopK most likely, ties to the
// lower id; TopP < 1: the fewest most likely holding TopP of what is left;
// MinP > 0: those at least MinP times the most likely) and the pick is the
// first token, in vocabulary order over what is left, at which the running
// probability mass exceeds U times the mass left.
type Draw struct {
	Temperature float64
	TopK        int
	TopP        float64 // 0 is read as 1 (off); NucleusP
	MinP        float64
	U           float64 // in [0, 1): the sequence's next uniform value
}

// Greedy reports whether d is the greedy pick.
func (d Draw) Greedy() bool { return d.Temperature < 1e-5 || d.TopK == 1 }

// NucleusP is d's top-p, 1 where it is off (0, or 1 and above).
func (d Draw) NucleusP() float64 {
	if d.TopP > 0 && d.TopP < 1 {
		return d.TopP
	}
	return 1
}

// Pick is a choice made by the runner: for a greedy pick the first index
// of the largest logit of a row (NaNs skipped), for a sampled one the token
// Chunk.Draw's settings pick; -1 when the row has no value above -Inf. Logprob
// is the token's log-softmax of the raw logits.
type Pick struct {
	ID      int32
	Logprob float64
}

// Batch is one forward step.
type Batch struct {
	Chunks []Chunk
}

// Logits holds the step's output: for chunk i, Rows[i] lists the logits rows
// (each VocabSize wide) in token order: one row, or len(Tokens) rows when
// AllLogits was set. Rows alias buffers the runner reuses on the next call.
// When the runner picked instead (every chunk PickOnly), Picks holds one
// pick per chunk and Rows is empty; otherwise Picks is empty.
type Logits struct {
	Rows  [][][]float32
	Picks []Pick
}

// Runner is a loaded model ready to run batches. It is not safe for
// concurrent use: the engine's scheduler goroutine owns it.
type Runner interface {
	Info() Info
	// Reserve makes room in the slot's KV cache for n more tokens beyond
	// its current length; it fails with ErrOutOfMemory if the budget is
	// exhausted and then reserves nothing.
	Reserve(slot, n int) error
	// Forward runs one step. Each chunk's slot must have been reserved for
	// its tokens. On success the slots' lengths advance by len(Tokens).
	Forward(b *Batch, out *Logits) error
	// Free releases everything the slot holds (KV pages, recurrent state);
	// the slot may be reused at position 0.
	Free(slot int)
	// FreeTokens reports how many more tokens the KV budget can hold.
	FreeTokens() int
	// Close releases the model's memory.
	Close() error
}

// As finds the first runner along r's wrapping chain (r, then what its
// Unwrap() Runner method returns, and so on) that is a T, so that a wrapper
// (arch.Load's, which also closes the backend) hides none of the optional
// interfaces of the runner it wraps.
func As[T any](r Runner) (T, bool) {
	for r != nil {
		if t, ok := r.(T); ok {
			return t, true
		}
		u, ok := r.(interface{ Unwrap() Runner })
		if !ok {
			break
		}
		r = u.Unwrap()
	}
	var zero T
	return zero, false
}

// PrefixCache is implemented by runners that can keep the KV of ended
// sequences and start new sequences from it (SGLang's radix cache; see
// package kvcache/radix). Only whole KV pages are kept and matched. A
// model with recurrent state (linear attention) resumes only at a
// position whose state it kept a snapshot of.
type PrefixCache interface {
	// MatchPrefix starts the empty slot with the longest cached prefix
	// of tokens computed with adapter, at most len(tokens)-1 tokens, and
	// returns its length: the slot is then at that position, and the
	// next chunk starts there. It reserves nothing beyond the prefix.
	MatchPrefix(slot, adapter int, tokens []int32) (int, error)
	// CachePrefix keeps the slot's KV of tokens (its first cached
	// tokens, whole pages) for later matches; call it before Free.
	CachePrefix(slot, adapter int, tokens []int32) error
	// FlushPrefixCache drops everything cached that no slot holds.
	FlushPrefixCache()
	// CachedPrefixTokens is the number of tokens the cache holds.
	CachedPrefixTokens() int
}

// PrefixBrancher is implemented by prefix caches that can also name a
// branch point: for a model with recurrent state, a cached prefix is
// resumable only where a state snapshot was kept, and other sequences'
// pages may cover more of the prompt than that (a shared system prompt
// followed by different messages: each earlier sequence kept its state
// only at its own end). The caller then ends a prefill chunk exactly at
// the branch point and calls CacheBranch with the tokens up to it right
// after that step, before the slot moves on, so that the state there is
// kept and later sequences sharing the prefix resume at it.
type PrefixBrancher interface {
	// MatchPrefixBranch is MatchPrefix, and also returns the branch
	// point: the end of the cached pages of tokens (whole pages, at most
	// len(tokens)-1 tokens) where that is beyond the match, else 0.
	MatchPrefixBranch(slot, adapter int, tokens []int32) (n, branch int, err error)
	// CacheBranch is CachePrefix for a running slot that just reached its
	// branch point: the state kept there serves every later sequence with
	// the prefix, so the cache gives it up after the others.
	CacheBranch(slot, adapter int, tokens []int32) error
}
