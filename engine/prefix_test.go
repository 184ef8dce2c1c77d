package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/ktserve/kt/arch"
	_ "github.com/ktserve/kt/arch/all"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/model"
)

// The prefix cache tests serve real fixtures (testdata/models) on the CPU
// backend and require every answer served with cache hits to be
// bit-identical (token ids and log probabilities, which the logits rows
// decide) to the same request served by an engine with the cache off.

// prefixFixtures: a plain-attention MoE model and a Qwen3.5 hybrid (Gated
// DeltaNet layers with recurrent state).
var prefixFixtures = []string{"qwen3moe-a", "qwen35moe-b"}

func loadFixtureRunner(t testing.TB, fixture string, maxTotal int) model.Runner {
	t.Helper()
	return loadFixtureSnaps(t, fixture, maxTotal, 4)
}

func loadFixtureSnaps(t testing.TB, fixture string, maxTotal, snaps int) model.Runner {
	t.Helper()
	be := cpu.New(cpu.Options{Threads: 2})
	r, err := arch.Load(fixtures.Dir(fixture), arch.Options{MaxSeqs: 4, MaxTotalTokens: maxTotal, MaxBatchTokens: 256, PageSize: 16, Backend: be, PrefixSnapshots: snaps})
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); be.Close() })
	return r
}

func runReal(t testing.TB, r model.Runner, cfg Config) *Engine {
	t.Helper()
	if cfg.MaxRunningRequests == 0 {
		cfg.MaxRunningRequests = 4
	}
	e, err := New(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return e
}

func lpParams(maxNew int) SamplingParams {
	p := greedy(maxNew)
	p.IgnoreEOS = true
	p.Logprobs = true
	p.TopLogprobs = 3
	return p
}

func ask(t *testing.T, e *Engine, prompt []int32, maxNew int) result {
	t.Helper()
	s, err := e.Submit(context.Background(), Request{Prompt: prompt, Params: lpParams(maxNew)})
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, s)
}

// tokensOf makes n pseudo-random tokens in [1, vocab) from seed.
func tokensOf(seed, n, vocab int) []int32 {
	out := make([]int32, n)
	x := uint32(seed*2654435761 + 12345)
	for i := range out {
		x = x*1664525 + 1013904223
		out[i] = int32(1 + int(x>>8)%(vocab-1))
	}
	return out
}

// sameAnswer fails unless got's tokens and log probabilities are
// bit-identical to want's.
func sameAnswer(t *testing.T, what string, got, want result) {
	t.Helper()
	if got.fin.Reason != want.fin.Reason || len(got.tokens) != len(want.tokens) {
		t.Fatalf("%s: %d tokens (%s), want %d (%s)", what, len(got.tokens), got.fin.Reason, len(want.tokens), want.fin.Reason)
	}
	for i := range got.tokens {
		g, w := got.tokens[i], want.tokens[i]
		same := g.ID == w.ID && g.Logprob == w.Logprob && len(g.Top) == len(w.Top)
		for j := 0; same && j < len(g.Top); j++ {
			same = g.Top[j] == w.Top[j]
		}
		if !same {
			t.Fatalf("%s: token %d is %d (logprob %v, top %v), want %d (logprob %v, top %v)", what, i, g.ID, g.Logprob, g.Top, w.ID, w.Logprob, w.Top)
		}
	}
}

// reference answers requests one at a time on an engine with the cache
// off, memoised by prompt.
type reference struct {
	t    *testing.T
	e    *Engine
	mu   sync.Mutex
	memo map[string]result
}

func newReference(t *testing.T, fixture string) *reference {
	r := loadFixtureRunner(t, fixture, 2048)
	return &reference{t: t, e: runReal(t, r, Config{DisableRadixCache: true}), memo: map[string]result{}}
}

func (ref *reference) answer(prompt []int32, maxNew int) result {
	ref.mu.Lock()
	defer ref.mu.Unlock()
	k := fmt.Sprint(prompt, maxNew)
	if r, ok := ref.memo[k]; ok {
		return r
	}
	r := ask(ref.t, ref.e, prompt, maxNew)
	if r.fin.CachedTokens != 0 {
		ref.t.Fatalf("reference engine reports %d cached tokens with the cache off", r.fin.CachedTokens)
	}
	ref.memo[k] = r
	return r
}

func TestPrefixCacheIdenticalAnswers(t *testing.T) {
	for _, fx := range prefixFixtures {
		t.Run(fx, func(t *testing.T) {
			hybrid := fx != "qwen3moe-a"
			ref := newReference(t, fx)
			vocab := ref.e.Info().VocabSize
			sys := tokensOf(1, 40, vocab) // 2 full pages and 8 tokens
			turn := func(parts ...[]int32) []int32 { return slices.Concat(parts...) }
			for _, chunk := range []int{0, 5, 16} {
				t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
					r := loadFixtureRunner(t, fx, 2048)
					e := runReal(t, r, Config{ChunkedPrefillSize: chunk})
					p1 := turn(sys, tokensOf(2, 9, vocab))
					a1 := ask(t, e, p1, 24)
					sameAnswer(t, "first turn", a1, ref.answer(p1, 24))
					if a1.fin.CachedTokens != 0 {
						t.Errorf("first request: %d cached tokens on an empty cache", a1.fin.CachedTokens)
					}
					// another user message after the same system prompt
					p2 := turn(sys, tokensOf(3, 11, vocab))
					a2 := ask(t, e, p2, 8)
					sameAnswer(t, "shared system prompt", a2, ref.answer(p2, 8))
					wantShared := 32
					if hybrid {
						wantShared = 0 // no state snapshot at the system prompt's end
					}
					if a2.fin.CachedTokens != wantShared {
						t.Errorf("shared system prompt: %d cached tokens, want %d", a2.fin.CachedTokens, wantShared)
					}
					// a third user message: the hybrid model's second request
					// stopped its prefill where it left the first one's pages
					// (the branch point, 32) and kept its state there
					p2b := turn(sys, tokensOf(5, 13, vocab))
					a2b := ask(t, e, p2b, 8)
					sameAnswer(t, "shared system prompt, third", a2b, ref.answer(p2b, 8))
					if a2b.fin.CachedTokens != 32 {
						t.Errorf("shared system prompt, third request: %d cached tokens, want 32", a2b.fin.CachedTokens)
					}
					if got, want := e.Stats().PrefixBranches, map[bool]uint64{false: 0, true: 1}[hybrid]; got != want {
						t.Errorf("%d prefills stopped at a branch point, want %d", got, want)
					}
					// multi-turn: the previous prompt and answer, then more:
					// 49+24-1 = 72 tokens were computed, 4 full pages
					p3 := turn(p1, a1.ids, tokensOf(4, 7, vocab))
					a3 := ask(t, e, p3, 8)
					sameAnswer(t, "next turn", a3, ref.answer(p3, 8))
					if a3.fin.CachedTokens != 64 {
						t.Errorf("next turn: %d cached tokens, want 64", a3.fin.CachedTokens)
					}
					// the same prompt again: everything but the last token's
					// page remainder comes from the cache
					a4 := ask(t, e, p3, 8)
					sameAnswer(t, "repeated prompt", a4, a3)
					st := e.Stats()
					if !st.RadixCache || st.PrefixHitTokens == 0 || st.CacheHitRate() <= 0 || st.CachedTokens == 0 {
						t.Errorf("stats %+v: want the cache on with hits", st)
					}
				})
			}
		})
	}
}

func TestPrefixCacheConcurrentSharedSystemPrompt(t *testing.T) {
	for _, fx := range prefixFixtures {
		t.Run(fx, func(t *testing.T) {
			ref := newReference(t, fx)
			vocab := ref.e.Info().VocabSize
			sys := tokensOf(7, 50, vocab)
			r := loadFixtureRunner(t, fx, 2048)
			e := runReal(t, r, Config{ChunkedPrefillSize: 32})
			warm := slices.Concat(sys, tokensOf(8, 30, vocab))
			sameAnswer(t, "warm-up", ask(t, e, warm, 20), ref.answer(warm, 20))
			var wg sync.WaitGroup
			res := make([]result, 4)
			prompts := make([][]int32, 4)
			for i := range res {
				prompts[i] = slices.Concat(sys, tokensOf(20+i, 5+3*i, vocab))
				wg.Go(func() { res[i] = ask(t, e, prompts[i], 12) })
			}
			wg.Wait()
			for i := range res {
				sameAnswer(t, fmt.Sprintf("request %d", i), res[i], ref.answer(prompts[i], 12))
				if fx == "qwen3moe-a" && res[i].fin.CachedTokens != 48 {
					t.Errorf("request %d: %d cached tokens, want the system prompt's 48", i, res[i].fin.CachedTokens)
				}
			}
			// the hybrid model: the concurrent requests computed the system
			// prompt's pages and kept its state at their end (48), so the
			// next request after it resumes there
			late := slices.Concat(sys, tokensOf(30, 6, vocab))
			got := ask(t, e, late, 12)
			sameAnswer(t, "after the concurrent requests", got, ref.answer(late, 12))
			if got.fin.CachedTokens != 48 {
				t.Errorf("after the concurrent requests: %d cached tokens, want the system prompt's 48", got.fin.CachedTokens)
			}
		})
	}
}

// TestPrefixCachePreemptionAndEviction serves more than the KV budget holds:
// sequences are preempted (their KV cached, then matched on resumption)
// and cached pages are evicted for new ones.
func TestPrefixCachePreemptionAndEviction(t *testing.T) {
	for _, fx := range prefixFixtures {
		t.Run(fx, func(t *testing.T) {
			ref := newReference(t, fx)
			vocab := ref.e.Info().VocabSize
			const budget = 192
			r := loadFixtureRunner(t, fx, budget)
			e := runReal(t, r, Config{ChunkedPrefillSize: 16})
			sys := tokensOf(30, 32, vocab)
			var wg sync.WaitGroup
			res := make([]result, 4)
			prompts := make([][]int32, 4)
			for i := range res {
				prompts[i] = slices.Concat(sys, tokensOf(31+i, 20, vocab))
				wg.Go(func() { res[i] = ask(t, e, prompts[i], 60) })
			}
			wg.Wait()
			for i := range res {
				sameAnswer(t, fmt.Sprintf("request %d", i), res[i], ref.answer(prompts[i], 60))
			}
			st := e.Stats()
			if st.Preemptions == 0 {
				t.Errorf("no preemption with 4×112 tokens in a %d-token budget", budget)
			}
			// distinct prompts, one after another, evict the older ones
			for i := range 6 {
				p := tokensOf(50+i, 70, vocab)
				sameAnswer(t, fmt.Sprintf("distinct %d", i), ask(t, e, p, 10), ref.answer(p, 10))
				if c := e.Stats().CachedTokens; c > budget {
					t.Fatalf("the cache holds %d tokens, more than the budget %d", c, budget)
				}
			}
			p := tokensOf(55, 70, vocab)
			if got := ask(t, e, p, 10); got.fin.CachedTokens != 64 {
				t.Errorf("the latest prompt again: %d cached tokens, want 64", got.fin.CachedTokens)
			}
		})
	}
}

// cancelRunner cancels a request's stream right after the runner's n-th
// forward step (on the scheduler goroutine, so the scheduler sees it
// before its next step).
type cancelRunner struct {
	model.Runner
	model.PrefixCache
	steps  int
	at     int
	ready  chan struct{} // closed once stream is set
	stream *Stream
}

func (c *cancelRunner) Forward(b *model.Batch, out *model.Logits) error {
	err := c.Runner.Forward(b, out)
	if c.steps++; c.steps == c.at {
		<-c.ready
		c.stream.Cancel()
	}
	return err
}

func TestPrefixCacheCancelMidPrefill(t *testing.T) {
	for _, fx := range prefixFixtures {
		t.Run(fx, func(t *testing.T) {
			ref := newReference(t, fx)
			vocab := ref.e.Info().VocabSize
			r := loadFixtureRunner(t, fx, 2048)
			cr := &cancelRunner{Runner: r, PrefixCache: r.(model.PrefixCache), at: 3, ready: make(chan struct{})}
			e := runReal(t, cr, Config{ChunkedPrefillSize: 16})
			p := tokensOf(60, 100, vocab)
			s, err := e.Submit(context.Background(), Request{Prompt: p, Params: lpParams(5)})
			if err != nil {
				t.Fatal(err)
			}
			cr.stream = s
			close(cr.ready)
			if got := collect(t, s); got.fin.Reason != FinishAbort || len(got.tokens) != 0 {
				t.Fatalf("cancelled mid-prefill: %s with %d tokens", got.fin.Reason, len(got.tokens))
			}
			got := ask(t, e, p, 5)
			sameAnswer(t, "after a cancelled prefill", got, ref.answer(p, 5))
			// the 3 chunks of 16 prefilled before the cancel; each ends on
			// a page boundary, so the hybrid model has a state snapshot
			// there too
			if c := got.fin.CachedTokens; c != 48 {
				t.Errorf("%d cached tokens, want 48", c)
			}
		})
	}
}

func TestPrefixCacheDisabledAndFlush(t *testing.T) {
	const fx = "qwen3moe-a"
	r := loadFixtureRunner(t, fx, 2048)
	off := runReal(t, r, Config{DisableRadixCache: true})
	vocab := off.Info().VocabSize
	p := tokensOf(70, 40, vocab)
	ask(t, off, p, 4)
	if got := ask(t, off, p, 4); got.fin.CachedTokens != 0 || off.Stats().RadixCache || off.Stats().CachedTokens != 0 {
		t.Fatalf("with --disable-radix-cache: %d cached tokens, stats %+v", got.fin.CachedTokens, off.Stats())
	}
	if err := off.FlushCache(context.Background()); err != nil {
		t.Fatalf("flush with the cache off: %v", err)
	}

	r2 := loadFixtureRunner(t, fx, 2048)
	e := runReal(t, r2, Config{})
	first := ask(t, e, p, 4)
	if got := ask(t, e, p, 4); got.fin.CachedTokens != 32 {
		t.Fatalf("repeat: %d cached tokens, want 32", got.fin.CachedTokens)
	} else {
		sameAnswer(t, "repeat", got, first)
	}
	// a flush while a request runs is refused
	s, err := e.Submit(context.Background(), Request{Prompt: p, Params: lpParams(200)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.FlushCache(context.Background()); err == nil {
		t.Error("flush with a request running succeeded")
	}
	collect(t, s)
	if err := e.FlushCache(context.Background()); err != nil {
		t.Fatalf("flush when idle: %v", err)
	}
	if c := e.Stats().CachedTokens; c != 0 {
		t.Fatalf("%d tokens cached after a flush", c)
	}
	if got := ask(t, e, p, 4); got.fin.CachedTokens != 0 {
		t.Fatalf("after a flush: %d cached tokens", got.fin.CachedTokens)
	}
}

// TestPrefixCacheHybridSnapshots: with one kept state snapshot, a second
// conversation takes it from the first, whose next turn then reuses
// nothing (its pages alone cannot resume a recurrent state) and still
// answers identically; with none kept, nothing is reused at all.
func TestPrefixCacheHybridSnapshots(t *testing.T) {
	const fx = "qwen35moe-b"
	ref := newReference(t, fx)
	vocab := ref.e.Info().VocabSize
	e := runReal(t, loadFixtureSnaps(t, fx, 2048, 1), Config{ChunkedPrefillSize: 16})
	pa, pb := tokensOf(80, 30, vocab), tokensOf(81, 30, vocab)
	aa, ab := ask(t, e, pa, 24), ask(t, e, pb, 24)
	na := slices.Concat(pa, aa.ids, tokensOf(82, 5, vocab))
	nb := slices.Concat(pb, ab.ids, tokensOf(83, 5, vocab))
	got := ask(t, e, nb, 4)
	sameAnswer(t, "second conversation's next turn", got, ref.answer(nb, 4))
	if got.fin.CachedTokens != 48 {
		t.Errorf("second conversation: %d cached tokens, want 48", got.fin.CachedTokens)
	}
	got = ask(t, e, na, 4)
	sameAnswer(t, "first conversation's next turn", got, ref.answer(na, 4))
	if got.fin.CachedTokens != 0 {
		t.Errorf("first conversation: %d cached tokens, want 0 (its snapshot was given to the second)", got.fin.CachedTokens)
	}

	none := runReal(t, loadFixtureSnaps(t, fx, 2048, 0), Config{ChunkedPrefillSize: 16})
	ask(t, none, pa, 24)
	got = ask(t, none, na, 4)
	sameAnswer(t, "no snapshots", got, ref.answer(na, 4))
	if got.fin.CachedTokens != 0 || none.Stats().CachedTokens != 0 {
		t.Errorf("without snapshots: %d cached tokens, %d in the cache; want none", got.fin.CachedTokens, none.Stats().CachedTokens)
	}
}
