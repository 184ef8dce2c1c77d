package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/internal/fakemodel"
)

func startEngine(t *testing.T, r *fakemodel.Runner, cfg Config) *Engine {
	t.Helper()
	e, start := newEngine(t, r, cfg)
	start()
	return e
}

// newEngine returns an engine and the function that starts its loop, so a
// test can queue requests first and make the schedule deterministic.
func newEngine(t *testing.T, r *fakemodel.Runner, cfg Config) (*Engine, func()) {
	t.Helper()
	if cfg.MaxRunningRequests == 0 {
		cfg.MaxRunningRequests = 8
	}
	e, err := New(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, func() {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- e.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// submitAll queues the requests, starts the engine and collects every answer.
func submitAll(t *testing.T, e *Engine, start func(), reqs []Request) []result {
	t.Helper()
	streams := make([]*Stream, len(reqs))
	for i, r := range reqs {
		s, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	start()
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() { out[i] = collect(t, s) })
	}
	wg.Wait()
	return out
}

type result struct {
	tokens []Token
	ids    []int32
	prompt []TokenLogprob
	fin    Finish
}

func collect(t *testing.T, s *Stream) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var res result
	for {
		u, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		res.tokens = append(res.tokens, u.Tokens...)
		if u.PromptLogprobs != nil {
			res.prompt = u.PromptLogprobs
		}
		if u.Finish != nil {
			res.fin = *u.Finish
			for _, tk := range res.tokens {
				res.ids = append(res.ids, tk.ID)
			}
			return res
		}
	}
}

// solo computes a greedy continuation without the engine.
func solo(r *fakemodel.Runner, vocab int, prompt []int32, maxNew int, eos int32) []int32 {
	toks := slices.Clone(prompt)
	row := make([]float32, vocab)
	var out []int32
	var sm sample.Sampler
	for len(out) < maxNew {
		r.Logits(toks, row)
		t := sm.Largest(row, 1)[0]
		out = append(out, t)
		toks = append(toks, t)
		if t == eos {
			break
		}
	}
	return out
}

func greedy(maxNew int) SamplingParams {
	p := DefaultSamplingParams()
	p.Temperature = 0
	p.MaxNewTokens = maxNew
	return p
}

func prompt(i, n int) []int32 {
	p := make([]int32, n)
	for j := range p {
		p[j] = int32((i*31 + j*7) % 250)
	}
	return p
}

func TestBatchedGreedyEqualsSolo(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mixed=%v", mixed), func(t *testing.T) {
			r := fakemodel.New(fakemodel.Config{EOS: 299, EOSAfter: 40})
			e, start := newEngine(t, r, Config{MaxRunningRequests: 5, ChunkedPrefillSize: 24, EnableMixedChunk: mixed})
			const n = 16
			var reqs []Request
			for i := range n {
				reqs = append(reqs, Request{Prompt: prompt(i, 5+i*7), Params: greedy(30)})
			}
			got := submitAll(t, e, start, reqs)
			for i := range n {
				want := solo(r, 300, prompt(i, 5+i*7), 30, 299)
				if !slices.Equal(got[i].ids, want) {
					t.Errorf("request %d: batched %v, solo %v", i, got[i].ids, want)
				}
				reason := FinishLength
				if want[len(want)-1] == 299 {
					reason = FinishStop
				}
				if got[i].fin.Reason != reason || got[i].fin.OutputTokens != len(want) || got[i].fin.PromptTokens != 5+i*7 {
					t.Errorf("request %d: finish %+v", i, got[i].fin)
				}
			}
			st := r.Stats()
			if st.MaxChunks > 5 {
				t.Errorf("a step ran %d sequences; --max-running-requests is 5", st.MaxChunks)
			}
			if st.MaxChunkTokens > 24 {
				t.Errorf("a chunk of %d tokens; --chunked-prefill-size is 24", st.MaxChunkTokens)
			}
			if !mixed && st.MixedSteps > 0 {
				t.Errorf("%d mixed steps without --enable-mixed-chunk", st.MixedSteps)
			}
			if mixed && st.MixedSteps == 0 {
				t.Errorf("no mixed step with --enable-mixed-chunk")
			}
			if r.UsedPages() != 0 {
				t.Errorf("%d KV pages still held after every request finished", r.UsedPages())
			}
		})
	}
}

func TestChunkedPrefillBudget(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{})
	e := startEngine(t, r, Config{ChunkedPrefillSize: 32})
	s, err := e.Submit(context.Background(), Request{Prompt: prompt(1, 200), Params: greedy(3)})
	if err != nil {
		t.Fatal(err)
	}
	res := collect(t, s)
	if want := solo(r, 300, prompt(1, 200), 3, -1); !slices.Equal(res.ids, want) {
		t.Errorf("got %v want %v", res.ids, want)
	}
	st := r.Stats()
	if st.MaxStepTokens > 32 || st.Steps < 200/32+3 {
		t.Errorf("steps %d, largest %d tokens", st.Steps, st.MaxStepTokens)
	}

	// Chunking off: the whole prompt in one step.
	r2 := fakemodel.New(fakemodel.Config{})
	e2 := startEngine(t, r2, Config{ChunkedPrefillSize: -1})
	s, err = e2.Submit(context.Background(), Request{Prompt: prompt(1, 200), Params: greedy(1)})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	if r2.Stats().MaxChunkTokens != 200 {
		t.Errorf("without chunking the largest chunk is %d", r2.Stats().MaxChunkTokens)
	}
}

func TestKVExhaustedPreemptsAndResumes(t *testing.T) {
	// 24 pages of 8 tokens = 192 tokens for 6 sequences that each grow to
	// 20+60 tokens: they cannot all fit, so some are preempted and
	// recomputed, and still answer exactly as alone.
	r := fakemodel.New(fakemodel.Config{PageSize: 8, Pages: 24})
	e, start := newEngine(t, r, Config{MaxRunningRequests: 6, ChunkedPrefillSize: 16, EnableMixedChunk: true})
	const n = 6
	var reqs []Request
	for i := range n {
		reqs = append(reqs, Request{Prompt: prompt(i, 20), Params: greedy(60)})
	}
	got := submitAll(t, e, start, reqs)
	pre := 0
	for i := range n {
		if want := solo(r, 300, prompt(i, 20), 60, -1); !slices.Equal(got[i].ids, want) {
			t.Errorf("request %d (preempted %d times): got %v want %v", i, got[i].fin.Preemptions, got[i].ids, want)
		}
		pre += got[i].fin.Preemptions
	}
	if pre == 0 || e.Stats().Preemptions == 0 {
		t.Errorf("the KV budget never ran out; the test does not test preemption")
	}
	if r.UsedPages() != 0 {
		t.Errorf("%d pages still held", r.UsedPages())
	}
}

func TestCancelFreesAtOnce(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{StepDelay: 2 * time.Millisecond})
	e := startEngine(t, r, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.Submit(ctx, Request{Prompt: prompt(0, 10), Params: greedy(100000 / 40)})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for a few tokens, then disconnect.
	n := 0
	for n < 3 {
		u, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(u.Tokens)
	}
	cancel()
	res := collect(t, s)
	if res.fin.Reason != FinishAbort {
		t.Errorf("finish %+v", res.fin)
	}
	if r.UsedPages() != 0 {
		t.Errorf("%d pages held after cancel", r.UsedPages())
	}
	// A queued request that is cancelled never runs.
	r2 := fakemodel.New(fakemodel.Config{StepDelay: time.Millisecond})
	e2 := startEngine(t, r2, Config{MaxRunningRequests: 1})
	s1, _ := e2.Submit(context.Background(), Request{Prompt: prompt(0, 4), Params: greedy(50)})
	s2, _ := e2.Submit(context.Background(), Request{Prompt: prompt(1, 4), Params: greedy(50)})
	s2.Cancel()
	if res := collect(t, s2); res.fin.Reason != FinishAbort || len(res.ids) != 0 {
		t.Errorf("cancelled queued request: %+v", res)
	}
	if res := collect(t, s1); res.fin.Reason != FinishLength || len(res.ids) != 50 {
		t.Errorf("other request: %+v", res.fin)
	}
}

func TestStops(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{EOS: 299, EOSAfter: 12})
	e := startEngine(t, r, Config{})
	p := prompt(3, 8)
	free := solo(r, 300, p, 40, -1)
	eosRun := solo(r, 300, p, 40, 299)

	// EOS from the model.
	s, _ := e.Submit(context.Background(), Request{Prompt: p, Params: greedy(40)})
	res := collect(t, s)
	if !slices.Equal(res.ids, eosRun) || res.fin.Reason != FinishStop || res.fin.MatchedStop != 299 {
		t.Errorf("eos: %v %+v, want %v", res.ids, res.fin, eosRun)
	}
	// ignore_eos runs to the limit.
	g := greedy(40)
	g.IgnoreEOS = true
	s, _ = e.Submit(context.Background(), Request{Prompt: p, Params: g})
	res = collect(t, s)
	if len(res.ids) != 40 || res.fin.Reason != FinishLength {
		t.Errorf("ignore_eos: %d tokens, %+v", len(res.ids), res.fin)
	}
	// A stop token id: the third token of the free run.
	g = greedy(40)
	g.IgnoreEOS = true
	g.StopTokenIDs = []int32{free[2]}
	s, _ = e.Submit(context.Background(), Request{Prompt: p, Params: g})
	res = collect(t, s)
	k := slices.Index(free, free[2])
	if !slices.Equal(res.ids, free[:k+1]) || res.fin.MatchedStop != free[2] {
		t.Errorf("stop token: %v %+v, want %v", res.ids, res.fin, free[:k+1])
	}
	// min_new_tokens bans stop tokens before it.
	g.MinNewTokens = 10
	s, _ = e.Submit(context.Background(), Request{Prompt: p, Params: g})
	res = collect(t, s)
	if i := slices.Index(res.ids, free[2]); i >= 0 && i < 9 {
		t.Errorf("stop token at %d before min_new_tokens: %v", i, res.ids)
	}
	if len(res.ids) < 10 {
		t.Errorf("stopped after %d tokens, min_new_tokens 10", len(res.ids))
	}
}

func TestSubmitErrors(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{ContextLen: 100, PageSize: 8, Pages: 8})
	e := startEngine(t, r, Config{})
	if e.MaxSequenceTokens() != 64 {
		t.Fatalf("max sequence tokens %d, want 64 (KV budget)", e.MaxSequenceTokens())
	}
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"empty", Request{Params: greedy(1)}},
		{"token out of vocab", Request{Prompt: []int32{1, 300}, Params: greedy(1)}},
		{"negative token", Request{Prompt: []int32{-1}, Params: greedy(1)}},
		{"prompt too long", Request{Prompt: prompt(0, 64), Params: greedy(1)}},
		{"prompt + max_new too long", Request{Prompt: prompt(0, 30), Params: greedy(40)}},
		{"negative max_new", Request{Prompt: prompt(0, 3), Params: greedy(-1)}},
		{"bad temperature", Request{Prompt: prompt(0, 3), Params: SamplingParams{Temperature: -1, TopP: 1, RepetitionPenalty: 1}}},
		{"nan top_p", Request{Prompt: prompt(0, 3), Params: SamplingParams{TopP: math.NaN(), RepetitionPenalty: 1}}},
		{"top_logprobs", Request{Prompt: prompt(0, 3), Params: SamplingParams{TopP: 1, RepetitionPenalty: 1, TopLogprobs: 21}}},
	} {
		if _, err := e.Submit(context.Background(), tc.req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// max_new_tokens 0 means "up to the limit".
	s, err := e.Submit(context.Background(), Request{Prompt: prompt(0, 60), Params: greedy(0)})
	if err != nil {
		t.Fatal(err)
	}
	if res := collect(t, s); len(res.ids) != 4 || res.fin.Reason != FinishLength {
		t.Errorf("default max_new: %d tokens %+v", len(res.ids), res.fin)
	}
}

func TestLogprobs(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{})
	e := startEngine(t, r, Config{ChunkedPrefillSize: 7})
	p := greedy(5)
	p.Logprobs = true
	p.TopLogprobs = 3
	p.PromptLogprobs = true
	pr := prompt(2, 20)
	s, err := e.Submit(context.Background(), Request{Prompt: pr, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	res := collect(t, s)
	row := make([]float32, 300)
	lp := func(toks []int32, next int32) float32 {
		r.Logits(toks, row)
		mx, lse := sample.LogSumExp(row)
		return sample.Logprob(row, next, mx, lse)
	}
	if len(res.prompt) != len(pr)-1 {
		t.Fatalf("%d prompt logprobs for %d tokens", len(res.prompt), len(pr))
	}
	for j, x := range res.prompt {
		if x.ID != pr[j+1] || math.Abs(float64(x.Logprob-lp(pr[:j+1], pr[j+1]))) > 1e-5 {
			t.Errorf("prompt logprob %d: %+v", j, x)
		}
	}
	toks := slices.Clone(pr)
	for i, tk := range res.tokens {
		if want := lp(toks, tk.ID); math.Abs(float64(tk.Logprob-want)) > 1e-5 {
			t.Errorf("token %d logprob %v want %v", i, tk.Logprob, want)
		}
		if len(tk.Top) != 3 || tk.Top[0].ID != tk.ID || tk.Top[0].Logprob < tk.Top[1].Logprob || tk.Top[1].Logprob < tk.Top[2].Logprob {
			t.Errorf("token %d top logprobs %+v", i, tk.Top)
		}
		toks = append(toks, tk.ID)
	}
}

func TestSeededSamplingIsReproducible(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{})
	e := startEngine(t, r, Config{})
	run := func(seed uint64, mod func(*SamplingParams)) []int32 {
		p := DefaultSamplingParams()
		p.MaxNewTokens = 30
		p.Seed, p.HasSeed = seed, true
		if mod != nil {
			mod(&p)
		}
		s, err := e.Submit(context.Background(), Request{Prompt: prompt(5, 6), Params: p})
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, s).ids
	}
	a, b, c := run(1, nil), run(1, nil), run(2, nil)
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different outputs:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("different seeds, same output %v", a)
	}
	g := solo(r, 300, prompt(5, 6), 30, -1)
	for name, mod := range map[string]func(*SamplingParams){
		"top_k=1":     func(p *SamplingParams) { p.TopK = 1 },
		"top_p tiny":  func(p *SamplingParams) { p.TopP = 1e-6 },
		"min_p=1":     func(p *SamplingParams) { p.MinP = 1 },
		"temperature": func(p *SamplingParams) { p.Temperature = 1e-7 },
	} {
		if got := run(3, mod); !slices.Equal(got, g) {
			t.Errorf("%s should be greedy: %v vs %v", name, got, g)
		}
	}
}

// evenOnly allows only even tokens.
type evenOnly struct{ n int }

func (c *evenOnly) Allow(t int32) bool { return t%2 == 0 }
func (c *evenOnly) Advance(int32)      { c.n++ }

func TestConstraint(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{})
	e := startEngine(t, r, Config{})
	for _, temp := range []float64{0, 1} {
		c := &evenOnly{}
		p := DefaultSamplingParams()
		p.Temperature = temp
		p.MaxNewTokens = 40
		p.Constraint = c
		p.TopK = 5
		s, err := e.Submit(context.Background(), Request{Prompt: prompt(9, 5), Params: p})
		if err != nil {
			t.Fatal(err)
		}
		res := collect(t, s)
		for _, id := range res.ids {
			if id%2 != 0 {
				t.Errorf("temperature %v: odd token %d in %v", temp, id, res.ids)
			}
		}
		if c.n != len(res.ids) {
			t.Errorf("Advance called %d times for %d tokens", c.n, len(res.ids))
		}
	}
}

func TestShutdownAbortsEverything(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{StepDelay: time.Millisecond})
	e, err := New(r, Config{MaxRunningRequests: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	s1, _ := e.Submit(context.Background(), Request{Prompt: prompt(0, 4), Params: greedy(1000)})
	s2, _ := e.Submit(context.Background(), Request{Prompt: prompt(1, 4), Params: greedy(1000)})
	time.Sleep(5 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Stream{s1, s2} {
		if res := collect(t, s); res.fin.Reason != FinishAbort || res.fin.Err == nil {
			t.Errorf("after shutdown: %+v", res.fin)
		}
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: prompt(0, 4), Params: greedy(1)}); !errors.Is(err, ErrStopped) {
		t.Errorf("submit after stop: %v", err)
	}
}

func TestWatchdog(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{StepDelay: 60 * time.Millisecond})
	hung := make(chan time.Duration, 10)
	e := startEngine(t, r, Config{WatchdogTimeout: 20 * time.Millisecond, OnHang: func(d time.Duration) { hung <- d }})
	s, _ := e.Submit(context.Background(), Request{Prompt: prompt(0, 4), Params: greedy(1)})
	collect(t, s)
	select {
	case <-hung:
	default:
		t.Errorf("a 60ms step did not trip a 20ms watchdog")
	}
}

// TestBatchedSeededSamplingEqualsSolo runs seeded top-p/top-k requests with
// logprobs together (their draws run concurrently within a step) and each
// alone: every request must produce the same tokens and logprobs.
func TestBatchedSeededSamplingEqualsSolo(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{})
	params := func(i int) SamplingParams {
		p := DefaultSamplingParams()
		p.MaxNewTokens = 20
		p.Seed, p.HasSeed = uint64(100+i), true
		p.Temperature = 0.8 + 0.1*float64(i%3)
		p.TopP = 0.5 + 0.1*float64(i%4)
		p.TopK = []int{0, 20, 50}[i%3]
		p.Logprobs, p.TopLogprobs = true, 2
		return p
	}
	const n = 12
	var reqs []Request
	for i := range n {
		reqs = append(reqs, Request{Prompt: prompt(i, 4+i), Params: params(i)})
	}
	e, start := newEngine(t, r, Config{MaxRunningRequests: n})
	got := submitAll(t, e, start, reqs)
	for i := range n {
		e1, start1 := newEngine(t, r, Config{MaxRunningRequests: 1})
		want := submitAll(t, e1, start1, reqs[i:i+1])[0]
		if !slices.Equal(got[i].ids, want.ids) {
			t.Fatalf("request %d: batched %v, alone %v", i, got[i].ids, want.ids)
		}
		for j := range want.tokens {
			if got[i].tokens[j].Logprob != want.tokens[j].Logprob || !slices.Equal(got[i].tokens[j].Top, want.tokens[j].Top) {
				t.Fatalf("request %d token %d: batched %+v, alone %+v", i, j, got[i].tokens[j], want.tokens[j])
			}
		}
	}
}

// TestDecodeStepTime checks that a sequence's finish reports the forward
// time of its decode steps only: none for a single token, which the
// prefill step makes.
func TestDecodeStepTime(t *testing.T) {
	r := fakemodel.New(fakemodel.Config{})
	e := startEngine(t, r, Config{})
	for _, c := range []struct {
		maxNew int
		some   bool
	}{{1, false}, {6, true}} {
		s, err := e.Submit(context.Background(), Request{Prompt: prompt(1, 8), Params: greedy(c.maxNew)})
		if err != nil {
			t.Fatal(err)
		}
		res := collect(t, s)
		if got := res.fin.DecodeStepTime > 0; got != c.some {
			t.Errorf("max_new_tokens %d: decode step time %v", c.maxNew, res.fin.DecodeStepTime)
		}
	}
}
