// Package fakemodel provides a deterministic model runner, a byte-level
// tokenizer and a ChatML template for testing the engine and the server
// without real weights. The runner's logits depend on every token of a
// sequence (as a real model's do through its KV cache), never on what else
// is in the batch, so a batched answer can be checked against a solo run;
// its KV budget is paged and can be exhausted.
package fakemodel

import (
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/ktserve/kt/model"
)

// Config sizes a fake runner.
type Config struct {
	Vocab      int // default 300
	ContextLen int // default 4096
	MaxSeqs    int // slots, default 64
	PageSize   int // KV page in tokens, default 16
	Pages      int // KV budget in pages, default 1024
	EOS        int32
	// EOSAfter makes EOS likelier as a sequence grows: its logit rises by
	// 1 per token generated past this many (0: never boosted).
	EOSAfter int
	// StepDelay is slept in every Forward, to simulate compute.
	StepDelay time.Duration
	// Script, when set, may force the next token of a sequence from its
	// tokens so far (prompt and output); ok=false leaves the pseudo-random
	// logits alone.
	Script func(tokens []int32) (next int32, ok bool)
}

// Runner is a deterministic model.Runner.
type Runner struct {
	cfg Config

	mu        sync.Mutex
	slots     []slotState
	freePages int
	rows      [][][]float32
	buf       []float32
	stats     Stats
}

type slotState struct {
	tokens []int32
	pages  int
}

// Stats counts what the runner saw, for tests.
type Stats struct {
	Steps          int
	MaxChunks      int // most chunks in one step
	MaxStepTokens  int // most tokens in one step
	MaxChunkTokens int // longest single chunk
	MixedSteps     int // steps with both a multi-token chunk and a single-token decode
	PeakPages      int
	Frees          int
}

// New returns a runner with cfg's defaults filled in.
func New(cfg Config) *Runner {
	if cfg.Vocab == 0 {
		cfg.Vocab = 300
	}
	if cfg.ContextLen == 0 {
		cfg.ContextLen = 4096
	}
	if cfg.MaxSeqs == 0 {
		cfg.MaxSeqs = 64
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = 16
	}
	if cfg.Pages == 0 {
		cfg.Pages = 1024
	}
	return &Runner{cfg: cfg, slots: make([]slotState, cfg.MaxSeqs), freePages: cfg.Pages}
}

// Info describes the fake model.
func (r *Runner) Info() model.Info {
	return model.Info{Architecture: "FakeForCausalLM", VocabSize: r.cfg.Vocab, ContextLen: r.cfg.ContextLen, EOSTokenIDs: []int32{r.cfg.EOS}}
}

// Reserve makes room for n more tokens in slot.
func (r *Runner) Reserve(slot, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slot < 0 || slot >= len(r.slots) {
		return fmt.Errorf("fakemodel: slot %d out of range", slot)
	}
	s := &r.slots[slot]
	need := (len(s.tokens)+n+r.cfg.PageSize-1)/r.cfg.PageSize - s.pages
	if need <= 0 {
		return nil
	}
	if need > r.freePages {
		return fmt.Errorf("fakemodel: slot %d needs %d pages, %d free: %w", slot, need, r.freePages, model.ErrOutOfMemory)
	}
	r.freePages -= need
	s.pages += need
	if used := r.cfg.Pages - r.freePages; used > r.stats.PeakPages {
		r.stats.PeakPages = used
	}
	return nil
}

// Forward checks the batch against the slots' state and computes logits.
func (r *Runner) Forward(b *model.Batch, out *model.Logits) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg.StepDelay > 0 {
		time.Sleep(r.cfg.StepDelay)
	}
	r.stats.Steps++
	r.stats.MaxChunks = max(r.stats.MaxChunks, len(b.Chunks))
	total, multi, single := 0, false, false
	nrows := 0
	for i, ch := range b.Chunks {
		if ch.Slot < 0 || ch.Slot >= len(r.slots) {
			return fmt.Errorf("fakemodel: chunk %d: slot %d out of range", i, ch.Slot)
		}
		s := &r.slots[ch.Slot]
		if ch.Pos != len(s.tokens) {
			return fmt.Errorf("fakemodel: chunk %d: slot %d holds %d tokens, chunk starts at %d", i, ch.Slot, len(s.tokens), ch.Pos)
		}
		if len(ch.Tokens) == 0 {
			return fmt.Errorf("fakemodel: chunk %d: no tokens", i)
		}
		if (ch.Pos+len(ch.Tokens)+r.cfg.PageSize-1)/r.cfg.PageSize > s.pages {
			return fmt.Errorf("fakemodel: chunk %d: slot %d not reserved for %d tokens", i, ch.Slot, ch.Pos+len(ch.Tokens))
		}
		if ch.Pos+len(ch.Tokens) > r.cfg.ContextLen {
			return fmt.Errorf("fakemodel: chunk %d: past the context length", i)
		}
		for _, t := range ch.Tokens {
			if t < 0 || int(t) >= r.cfg.Vocab {
				return fmt.Errorf("fakemodel: chunk %d: token %d outside the vocabulary", i, t)
			}
		}
		total += len(ch.Tokens)
		r.stats.MaxChunkTokens = max(r.stats.MaxChunkTokens, len(ch.Tokens))
		if len(ch.Tokens) > 1 {
			multi = true
		} else if ch.Pos > 0 {
			single = true
		}
		if ch.AllLogits {
			nrows += len(ch.Tokens)
		} else {
			nrows++
		}
	}
	r.stats.MaxStepTokens = max(r.stats.MaxStepTokens, total)
	if multi && single {
		r.stats.MixedSteps++
	}
	if cap(r.buf) < nrows*r.cfg.Vocab {
		r.buf = make([]float32, nrows*r.cfg.Vocab)
	}
	buf := r.buf[:nrows*r.cfg.Vocab]
	out.Rows = out.Rows[:0]
	for _, ch := range b.Chunks {
		s := &r.slots[ch.Slot]
		var rows [][]float32
		for j, t := range ch.Tokens {
			s.tokens = append(s.tokens, t)
			if ch.AllLogits || j == len(ch.Tokens)-1 {
				row := buf[:r.cfg.Vocab:r.cfg.Vocab]
				buf = buf[r.cfg.Vocab:]
				r.logits(s.tokens, row)
				rows = append(rows, row)
			}
		}
		out.Rows = append(out.Rows, rows)
	}
	return nil
}

// Logits computes the row for a sequence holding tokens; exported so tests
// can compute expected answers without the engine.
func (r *Runner) Logits(tokens []int32, row []float32) { r.logits(tokens, row) }

func (r *Runner) logits(tokens []int32, row []float32) {
	h := fnv.New64a()
	var b [4]byte
	for _, t := range tokens {
		b[0], b[1], b[2], b[3] = byte(t), byte(t>>8), byte(t>>16), byte(t>>24)
		h.Write(b[:])
	}
	x := h.Sum64() | 1
	for i := range row {
		// xorshift64*: cheap, deterministic pseudo-random logits in [0, 4).
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		row[i] = float32((x*2685821657736338717)>>40) / float32(1<<24) * 4
	}
	if r.cfg.EOSAfter > 0 {
		row[r.cfg.EOS] = float32(len(tokens)-r.cfg.EOSAfter) * 0.5
	} else {
		row[r.cfg.EOS] = -30
	}
	if r.cfg.Script != nil {
		if next, ok := r.cfg.Script(tokens); ok && int(next) < len(row) {
			row[next] = 100
		}
	}
}

// Free releases a slot.
func (r *Runner) Free(slot int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slot < 0 || slot >= len(r.slots) {
		return
	}
	s := &r.slots[slot]
	r.freePages += s.pages
	s.pages = 0
	s.tokens = s.tokens[:0]
	r.stats.Frees++
}

// FreeTokens reports the free KV budget in tokens.
func (r *Runner) FreeTokens() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.freePages * r.cfg.PageSize
}

// UsedPages reports the KV pages held.
func (r *Runner) UsedPages() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.Pages - r.freePages
}

// Stats returns the counters so far.
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close does nothing.
func (r *Runner) Close() error { return nil }

var _ model.Runner = (*Runner)(nil)
