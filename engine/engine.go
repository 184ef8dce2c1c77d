// Package engine is the scheduler between a model runner and the requests
// of the HTTP server (and kt generate's one prompt). One goroutine (Run)
// owns all engine state and the runner: it admits requests within
// --max-running-requests and the KV budget, builds each forward step from
// prefill chunks (bounded by --chunked-prefill-size) and decode tokens
// (mixed in one step with --enable-mixed-chunk), samples, and hands tokens
// to each request's Stream. When the KV budget runs out mid-decode the
// most recently admitted sequences are preempted: their memory is freed
// and they are recomputed later from their tokens, so the answer is the
// same as if they had never been interrupted.
//
// With a runner that implements model.PrefixCache (unless
// Config.DisableRadixCache), the KV pages of every sequence that ends or is
// preempted are kept in a radix tree (SGLang's radix cache), and a sequence
// admitted later starts after the longest cached prefix of its tokens: its
// first prefill chunk begins at the first position not cached.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/model"
)

// Config sizes the scheduler; it mirrors the serve flags of the same names.
type Config struct {
	MaxRunningRequests int // sequences in flight at once (runner slots)
	ChunkedPrefillSize int // prompt tokens per step; <= 0 disables chunking
	MaxPrefillTokens   int // prompt tokens of several prompts in one step (default 16384)
	EnableMixedChunk   bool
	ContextLength      int     // 0: the model's
	EOSTokenIDs        []int32 // stop tokens besides the model's (generation_config)
	Seed               uint64  // base of the seeds of requests that give none
	RandomSeed         bool    // draw request seeds at random (ignore Seed)
	WatchdogTimeout    time.Duration
	// DisableRadixCache turns the prefix cache off (--disable-radix-cache):
	// every prompt is prefilled from its first token.
	DisableRadixCache bool
	// OnHang is called (from another goroutine) when one forward step has
	// taken longer than WatchdogTimeout. The default logs an error.
	OnHang func(step time.Duration)
	Logger *slog.Logger
}

// Stats is a snapshot of the engine for metrics and /get_server_info.
type Stats struct {
	Running, Queued   int
	UsedTokens        int // KV tokens held
	MaxTotalTokens    int // KV budget in tokens
	PromptTokens      uint64
	GenerationTokens  uint64
	Preemptions       uint64
	Steps             uint64
	RequestsFinished  uint64
	LastStepTokens    int
	LastStepDecodes   int
	LastStepDuration  time.Duration
	StepDurationTotal time.Duration
	// PrefixQueryTokens counts the tokens of admitted sequences the prefix
	// cache was asked about, PrefixHitTokens those it supplied; their
	// ratio is the hit rate. CachedTokens is the cache's size in tokens.
	PrefixQueryTokens uint64
	PrefixHitTokens   uint64
	CachedTokens      int
	// PrefixBranches counts the prefills stopped at a branch point to
	// cache a shared prefix with its recurrent state (models with linear
	// attention; model.PrefixBrancher).
	PrefixBranches uint64
	// RadixCache says whether the prefix cache is on.
	RadixCache bool
}

// CacheHitRate is the fraction of admitted tokens the prefix cache
// supplied.
func (s Stats) CacheHitRate() float64 {
	if s.PrefixQueryTokens == 0 {
		return 0
	}
	return float64(s.PrefixHitTokens) / float64(s.PrefixQueryTokens)
}

// TokenUsage is the fraction of the KV budget in use.
func (s Stats) TokenUsage() float64 {
	if s.MaxTotalTokens == 0 {
		return 0
	}
	return float64(s.UsedTokens) / float64(s.MaxTotalTokens)
}

// Engine schedules sequences on a model runner.
type Engine struct {
	r      model.Runner
	cfg    Config
	info   model.Info
	ctxLen int
	budget int // KV capacity in tokens
	log    *slog.Logger

	submitMu sync.Mutex
	incoming []*seq
	stopped  bool
	wakeCh   chan struct{}
	done     chan struct{}
	seedCtr  atomic.Uint64

	stats   atomic.Pointer[Stats]
	stepBeg atomic.Int64 // unix nanos of the running step's start, 0 when idle

	// Owned by the scheduler goroutine.
	waiting   []*seq
	running   []*seq
	freeSlots []int
	admitted  uint64
	sms       []sample.Sampler // scratch, one per concurrent draw
	pending   []pick           // this step's draws
	batch     model.Batch
	logits    model.Logits
	chunkSeq  []*seq
	st        Stats
	eos       map[int32]bool
	pc        model.PrefixCache    // nil: no prefix cache
	pb        model.PrefixBrancher // pc's branch points (nil: pc names none)
	flushCh   chan chan error
}

// seq is one sequence's scheduler state.
type seq struct {
	req        Request
	stream     *Stream
	tokens     []int32 // prompt then generated tokens
	promptLen  int
	computed   int // tokens in the runner's cache
	slot       int
	order      uint64 // admission order, for preemption
	smp        *sample.Sequence
	stops      map[int32]bool
	maxNew     int
	generated  int
	preempted  int
	promptDone bool // prompt logprobs delivered
	promptLP   promptLogprobs
	cached     int  // prompt tokens the prefix cache supplied at first admission
	admittedOK bool // admitted at least once
	// branch is where a prefill chunk ends so that the tokens up to it are
	// cached with the recurrent state there (model.PrefixBrancher); 0: none
	branch int
	// u is the uniform value taken from smp's stream for this step's draw
	// when the chunk asked the runner to draw (model.Chunk.Draw); the host
	// draws with it when the runner hands rows back instead. -1: none.
	u float64
	// decodeStepTime sums the forward time of the steps that decoded s.
	decodeStepTime time.Duration
}

// New prepares an engine for r. It reads the runner's KV budget, so it must
// be called before anything is reserved.
func New(r model.Runner, cfg Config) (*Engine, error) {
	info := r.Info()
	if info.VocabSize <= 0 {
		return nil, fmt.Errorf("engine: model reports vocab size %d", info.VocabSize)
	}
	if cfg.MaxRunningRequests <= 0 {
		return nil, fmt.Errorf("engine: max running requests must be positive, got %d", cfg.MaxRunningRequests)
	}
	if cfg.MaxPrefillTokens <= 0 {
		cfg.MaxPrefillTokens = 16384
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctxLen := info.ContextLen
	if cfg.ContextLength > 0 {
		if ctxLen > 0 && cfg.ContextLength > ctxLen {
			return nil, fmt.Errorf("engine: context length %d exceeds the model's %d", cfg.ContextLength, ctxLen)
		}
		ctxLen = cfg.ContextLength
	}
	if ctxLen <= 0 {
		return nil, fmt.Errorf("engine: no context length (the model reports %d and none was set)", info.ContextLen)
	}
	budget := r.FreeTokens()
	if budget <= 1 {
		return nil, fmt.Errorf("engine: the KV budget holds %d tokens", budget)
	}
	e := &Engine{
		r: r, cfg: cfg, info: info, ctxLen: ctxLen, budget: budget, log: cfg.Logger,
		wakeCh: make(chan struct{}, 1), done: make(chan struct{}),
		eos: map[int32]bool{}, flushCh: make(chan chan error),
	}
	if pc, ok := model.As[model.PrefixCache](r); ok && !cfg.DisableRadixCache {
		e.pc = pc
		e.pb, _ = pc.(model.PrefixBrancher)
		e.st.RadixCache = true
	}
	for _, t := range append(slices.Clone(info.EOSTokenIDs), cfg.EOSTokenIDs...) {
		e.eos[t] = true
	}
	for i := cfg.MaxRunningRequests - 1; i >= 0; i-- {
		e.freeSlots = append(e.freeSlots, i)
	}
	e.st.MaxTotalTokens = budget
	e.publish()
	return e, nil
}

// Info is the model's description.
func (e *Engine) Info() model.Info { return e.info }

// ContextLength is the most tokens (prompt plus output) one sequence may hold.
func (e *Engine) ContextLength() int { return e.ctxLen }

// MaxTotalTokens is the KV budget in tokens.
func (e *Engine) MaxTotalTokens() int { return e.budget }

// MaxSequenceTokens is the most tokens one sequence can reach: the
// context length, or the whole KV budget if that is smaller.
func (e *Engine) MaxSequenceTokens() int { return min(e.ctxLen, e.budget) }

// EOSTokenIDs lists the tokens that end a sequence unless IgnoreEOS.
func (e *Engine) EOSTokenIDs() []int32 {
	out := make([]int32, 0, len(e.eos))
	for t := range e.eos {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Stats returns the latest snapshot.
func (e *Engine) Stats() Stats { return *e.stats.Load() }

func (e *Engine) publish() {
	s := e.st
	e.stats.Store(&s)
}

func (e *Engine) wake() {
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
}

// Submit validates a request and queues it. The returned stream delivers
// its tokens; when ctx ends before the sequence does, it is cancelled and
// everything it holds is freed. Errors wrapping ErrInvalidRequest mean the
// request can never run.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
	p := req.Params
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(req.Prompt) == 0 {
		return nil, fmt.Errorf("%w: the prompt is empty", ErrInvalidRequest)
	}
	if err := p.checkVocab(e.info.VocabSize); err != nil {
		return nil, err
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= e.info.VocabSize {
			return nil, fmt.Errorf("%w: prompt token %d at position %d is outside the vocabulary [0, %d)", ErrInvalidRequest, t, i, e.info.VocabSize)
		}
	}
	limit := e.MaxSequenceTokens()
	if len(req.Prompt) >= limit {
		return nil, fmt.Errorf("%w: the prompt has %d tokens; this server takes at most %d (context length %d, KV budget %d) including at least one output token",
			ErrInvalidRequest, len(req.Prompt), limit-1, e.ctxLen, e.budget)
	}
	maxNew := p.MaxNewTokens
	if maxNew == 0 && !p.PromptOnly {
		maxNew = limit - len(req.Prompt)
	}
	if len(req.Prompt)+maxNew > limit {
		return nil, fmt.Errorf("%w: the prompt (%d tokens) plus max_new_tokens (%d) exceeds %d tokens (context length %d, KV budget %d)",
			ErrInvalidRequest, len(req.Prompt), maxNew, limit, e.ctxLen, e.budget)
	}
	seed := p.Seed
	if !p.HasSeed {
		if e.cfg.RandomSeed {
			seed = rand.Uint64()
		} else {
			seed = e.cfg.Seed + e.seedCtr.Add(1)
		}
	}
	s := &seq{
		req:       req,
		tokens:    slices.Clip(slices.Clone(req.Prompt)),
		promptLen: len(req.Prompt),
		slot:      -1,
		maxNew:    maxNew,
		stops:     map[int32]bool{},
		u:         -1,
	}
	s.req.Params = p
	s.smp = sample.NewSequence(p.sampleParams(), req.Prompt, seed)
	if !p.IgnoreEOS {
		for t := range e.eos {
			s.stops[t] = true
		}
	}
	for _, t := range p.StopTokenIDs {
		s.stops[t] = true
	}
	s.stream = newStream(e.wake)
	s.stream.stopWatch = context.AfterFunc(ctx, s.stream.Cancel)

	e.submitMu.Lock()
	if e.stopped {
		e.submitMu.Unlock()
		s.stream.stopWatch()
		return nil, ErrStopped
	}
	e.incoming = append(e.incoming, s)
	e.submitMu.Unlock()
	e.wake()
	return s.stream, nil
}

// ErrBusy is returned by FlushCache while requests are running or queued.
var ErrBusy = errors.New("engine: requests are running or queued")

// FlushCache empties the prefix cache, as SGLang's /flush_cache: only when
// no request is running or queued (else an error wrapping ErrBusy). It
// does nothing (and succeeds) when the cache is off.
func (e *Engine) FlushCache(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case e.flushCh <- reply:
	case <-e.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush answers one FlushCache call (scheduler goroutine).
func (e *Engine) flush(reply chan error) {
	e.drainIncoming()
	e.reapCancelled()
	if len(e.running) > 0 || len(e.waiting) > 0 {
		reply <- fmt.Errorf("cache not flushed: %d running and %d queued requests: %w", len(e.running), len(e.waiting), ErrBusy)
		return
	}
	if e.pc != nil {
		e.pc.FlushPrefixCache()
	}
	e.publishState()
	reply <- nil
}

// Done is closed when Run has returned.
func (e *Engine) Done() <-chan struct{} { return e.done }

// Run is the scheduler loop. It returns when ctx ends, after ending every
// sequence with FinishAbort, or when the runner fails.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.done)
	if e.cfg.WatchdogTimeout > 0 {
		stop := make(chan struct{})
		defer close(stop)
		go e.watchdog(stop)
	}
	err := e.loop(ctx)
	e.submitMu.Lock()
	e.stopped = true
	in := e.incoming
	e.incoming = nil
	e.submitMu.Unlock()
	reason := errors.New("the server is shutting down")
	if err != nil {
		reason = err
	}
	for _, s := range slices.Concat(e.running, e.waiting, in) {
		if s.slot >= 0 {
			e.r.Free(s.slot)
		}
		e.finish(s, Finish{Reason: FinishAbort, MatchedStop: -1, Err: reason})
	}
	e.running, e.waiting = nil, nil
	e.st.Running, e.st.Queued, e.st.UsedTokens = 0, 0, 0
	e.publish()
	return err
}

func (e *Engine) watchdog(stop chan struct{}) {
	t := time.NewTicker(min(e.cfg.WatchdogTimeout/4, time.Second))
	defer t.Stop()
	fired := int64(0)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			beg := e.stepBeg.Load()
			if beg == 0 || beg == fired {
				continue
			}
			if d := time.Since(time.Unix(0, beg)); d > e.cfg.WatchdogTimeout {
				fired = beg
				if e.cfg.OnHang != nil {
					e.cfg.OnHang(d)
				} else {
					e.log.Error("watchdog: a forward step is taking too long", "elapsed", d, "timeout", e.cfg.WatchdogTimeout)
				}
			}
		}
	}
}

func (e *Engine) loop(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		e.drainIncoming()
		e.reapCancelled()
		if len(e.running) == 0 && len(e.waiting) == 0 {
			e.publishState()
			select {
			case <-ctx.Done():
				return nil
			case <-e.wakeCh:
			case reply := <-e.flushCh:
				e.flush(reply)
			}
			continue
		}
		select {
		case reply := <-e.flushCh:
			e.flush(reply)
		default:
		}
		e.admit()
		if err := e.step(); err != nil {
			return err
		}
		e.publishState()
	}
}

func (e *Engine) drainIncoming() {
	e.submitMu.Lock()
	in := e.incoming
	e.incoming = nil
	e.submitMu.Unlock()
	e.waiting = append(e.waiting, in...)
}

// reapCancelled ends every cancelled sequence and frees its slot at once.
func (e *Engine) reapCancelled() {
	keep := e.waiting[:0]
	for _, s := range e.waiting {
		if s.stream.cancelled.Load() {
			e.finish(s, Finish{Reason: FinishAbort, MatchedStop: -1})
		} else {
			keep = append(keep, s)
		}
	}
	clear(e.waiting[len(keep):])
	e.waiting = keep
	keepR := e.running[:0]
	for _, s := range e.running {
		if s.stream.cancelled.Load() {
			e.release(s)
			e.finish(s, Finish{Reason: FinishAbort, MatchedStop: -1})
		} else {
			keepR = append(keepR, s)
		}
	}
	clear(e.running[len(keepR):])
	e.running = keepR
}

// release frees a running sequence's slot and KV memory, keeping its
// computed tokens' KV in the prefix cache when that is on.
func (e *Engine) release(s *seq) {
	if e.pc != nil && s.computed > 0 {
		if err := e.pc.CachePrefix(s.slot, s.req.Adapter, s.tokens[:s.computed]); err != nil {
			e.log.Warn("prefix cache: keeping a sequence's KV failed", "id", s.req.ID, "err", err)
		}
	}
	e.r.Free(s.slot)
	e.freeSlots = append(e.freeSlots, s.slot)
	s.slot = -1
	s.computed = 0
	s.branch = 0
}

func (e *Engine) finish(s *seq, f Finish) {
	f.PromptTokens = s.promptLen
	f.OutputTokens = s.generated
	f.Preemptions = s.preempted
	f.CachedTokens = s.cached
	f.DecodeStepTime = s.decodeStepTime
	s.stream.end(f)
	e.st.RequestsFinished++
}

// headroom is the KV space kept free for the running sequences' next
// tokens when admitting a new one, so that admission does not force an
// immediate preemption.
func (e *Engine) headroom() int {
	h := 0
	for _, s := range e.running {
		h += min(s.maxNew-s.generated, 16)
	}
	return h
}

// admit moves waiting sequences to running while slots and KV allow, in
// arrival order (preempted sequences go first).
func (e *Engine) admit() {
	for len(e.waiting) > 0 && len(e.freeSlots) > 0 {
		s := e.waiting[0]
		slot := e.freeSlots[len(e.freeSlots)-1]
		hit, branch, err := e.matchPrefix(s, slot)
		if err != nil {
			e.waiting = e.waiting[1:]
			e.finish(s, Finish{Reason: FinishAbort, MatchedStop: -1, Err: err})
			continue
		}
		need := len(s.tokens) - hit
		if len(e.running) > 0 && e.r.FreeTokens() < need+e.headroom() {
			if hit > 0 {
				e.r.Free(slot)
			}
			return
		}
		if err := e.r.Reserve(slot, need); err != nil {
			if hit > 0 {
				e.r.Free(slot)
			}
			if !errors.Is(err, model.ErrOutOfMemory) {
				e.waiting = e.waiting[1:]
				e.finish(s, Finish{Reason: FinishAbort, MatchedStop: -1, Err: fmt.Errorf("reserving KV memory: %w", err)})
				continue
			}
			if len(e.running) == 0 {
				// Nothing to wait for: the budget is smaller than Submit
				// believed. Fail this one rather than wait forever.
				e.waiting = e.waiting[1:]
				e.finish(s, Finish{Reason: FinishAbort, MatchedStop: -1, Err: fmt.Errorf("the KV budget cannot hold %d tokens: %w", need, err)})
				continue
			}
			return
		}
		e.freeSlots = e.freeSlots[:len(e.freeSlots)-1]
		e.waiting = e.waiting[1:]
		s.slot = slot
		s.computed = hit
		s.branch = branch
		if e.pc != nil {
			e.st.PrefixQueryTokens += uint64(len(s.tokens))
			e.st.PrefixHitTokens += uint64(hit)
		}
		if !s.admittedOK {
			s.admittedOK = true
			s.cached = min(hit, s.promptLen)
		}
		e.admitted++
		s.order = e.admitted
		e.running = append(e.running, s)
	}
}

// matchPrefix starts the empty slot with the cached prefix of s's tokens
// and returns its length (0 with the cache off, or when s wants prompt
// logprobs, which need every prompt position computed) and the branch
// point past it where the prefill stops to cache its state (0: none).
func (e *Engine) matchPrefix(s *seq, slot int) (n, branch int, err error) {
	if e.pc == nil || (s.req.Params.PromptLogprobs && !s.promptDone) {
		return 0, 0, nil
	}
	if e.pb != nil {
		n, branch, err = e.pb.MatchPrefixBranch(slot, s.req.Adapter, s.tokens)
	} else {
		n, err = e.pc.MatchPrefix(slot, s.req.Adapter, s.tokens)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("matching the prefix cache: %w", err)
	}
	if n < 0 || n >= len(s.tokens) {
		e.r.Free(slot)
		return 0, 0, fmt.Errorf("the prefix cache matched %d of %d tokens", n, len(s.tokens))
	}
	if branch <= n || branch >= len(s.tokens) {
		branch = 0
	}
	return n, branch, nil
}

// cacheBranch keeps a sequence's tokens up to its branch point, with the
// recurrent state there, once a prefill chunk ended on it.
func (e *Engine) cacheBranch(s *seq) {
	if s.computed == s.branch {
		if err := e.pb.CacheBranch(s.slot, s.req.Adapter, s.tokens[:s.computed]); err != nil {
			e.log.Warn("prefix cache: keeping a shared prefix's state failed", "id", s.req.ID, "err", err)
		} else {
			e.st.PrefixBranches++
		}
	}
	s.branch = 0
}

// makeRoom preempts the most recently admitted running sequence to free KV
// memory for s. It returns false when s is the only running sequence; it
// may preempt s itself when s is the newest.
func (e *Engine) makeRoom(s *seq) bool {
	var victim *seq
	for _, x := range e.running {
		if x.slot >= 0 && (victim == nil || x.order > victim.order) {
			victim = x
		}
	}
	if victim == nil || victim == s && len(e.running) == 1 {
		return false
	}
	e.preempt(victim)
	return true
}

func (e *Engine) preempt(s *seq) {
	e.release(s)
	s.preempted++
	if !s.promptDone {
		s.promptLP = promptLogprobs{}
	}
	e.st.Preemptions++
	e.running = slices.DeleteFunc(e.running, func(x *seq) bool { return x == s })
	// Resume before newer arrivals, after sequences preempted earlier that
	// were admitted before s.
	i := 0
	for i < len(e.waiting) && e.waiting[i].preempted > 0 && e.waiting[i].order < s.order {
		i++
	}
	e.waiting = slices.Insert(e.waiting, i, s)
	e.log.Debug("preempted", "id", s.req.ID, "tokens", len(s.tokens), "free_tokens", e.r.FreeTokens())
}

// reserveDecodes reserves one more token for each decoding sequence,
// preempting the newest sequences when the KV budget runs out, and adds
// the decode chunks to the batch.
func (e *Engine) reserveDecodes(decodes []*seq) error {
	var chosen []*seq
	for _, s := range decodes {
		if s.slot < 0 {
			continue // preempted to make room for an earlier one
		}
		for {
			err := e.r.Reserve(s.slot, 1)
			if err == nil {
				chosen = append(chosen, s)
				break
			}
			if !errors.Is(err, model.ErrOutOfMemory) {
				return fmt.Errorf("engine: reserving KV memory: %w", err)
			}
			if !e.makeRoom(s) {
				// s is alone and still cannot grow: Submit's bound makes
				// this unreachable unless the runner's budget shrank.
				e.release(s)
				e.running = slices.DeleteFunc(e.running, func(x *seq) bool { return x == s })
				e.finish(s, Finish{Reason: FinishAbort, MatchedStop: -1, Err: fmt.Errorf("the KV budget is exhausted by this request alone: %w", err)})
				break
			}
			if s.slot < 0 {
				break // s itself was the newest and was preempted
			}
		}
	}
	for _, s := range chosen {
		if s.slot < 0 {
			continue
		}
		ch := model.Chunk{Slot: s.slot, Pos: s.computed, Tokens: s.tokens[s.computed:], Adapter: s.req.Adapter}
		ch.Draw, ch.PickOnly = e.pickDraw(s)
		e.batch.Chunks = append(e.batch.Chunks, ch)
		e.chunkSeq = append(e.chunkSeq, s)
	}
	return nil
}

// pickDraw reports whether the runner may pick s's next token
// (model.Chunk.PickOnly): nothing but the token and its logprob is wanted
// of the row (no top logprobs), and the draw has no penalty, constraint or
// stop-token ban before min_new_tokens. A sampled draw then takes its
// uniform value from s's stream now (s.u), so that the runner's draw and
// the host's, should the runner hand the row back, use the value the host
// sampler alone would have.
func (e *Engine) pickDraw(s *seq) (model.Draw, bool) {
	p := &s.req.Params
	if p.TopLogprobs > 0 || len(p.TokenIDsLogprob) > 0 || s.generated < p.MinNewTokens || !s.smp.Plain() {
		return model.Draw{}, false
	}
	d := s.smp.NextDraw()
	if !d.Greedy() {
		s.u = d.U
	}
	return d, true
}

// planPrefills adds prefill chunks, oldest sequence first, within budget
// tokens, and returns how many prompt tokens it added.
func (e *Engine) planPrefills(prefills []*seq, budget int) (int, error) {
	total := 0
	for _, s := range prefills {
		if s.slot < 0 {
			continue
		}
		n := len(s.tokens) - s.computed
		if s.branch > s.computed {
			n = s.branch - s.computed // end the chunk at the branch point
		}
		left := budget - total
		if e.cfg.ChunkedPrefillSize > 0 {
			if left <= 0 {
				break
			}
			n = min(n, left)
		} else if total > 0 && n > left {
			break // no chunking: whole prompts only; the first always goes
		}
		if err := e.r.Reserve(s.slot, n); err != nil {
			// Admission reserved the whole prompt, so this means the
			// runner's accounting differs; try again next step.
			if errors.Is(err, model.ErrOutOfMemory) {
				continue
			}
			return 0, fmt.Errorf("engine: reserving KV memory: %w", err)
		}
		wantAll := s.req.Params.PromptLogprobs && !s.promptDone && s.computed < s.promptLen-1
		e.batch.Chunks = append(e.batch.Chunks, model.Chunk{Slot: s.slot, Pos: s.computed, Tokens: s.tokens[s.computed : s.computed+n], AllLogits: wantAll, Adapter: s.req.Adapter})
		e.chunkSeq = append(e.chunkSeq, s)
		total += n
	}
	return total, nil
}

// step runs one forward pass and samples from it.
func (e *Engine) step() error {
	if len(e.running) == 0 {
		return nil
	}
	var decodes, prefills []*seq
	for _, s := range e.running {
		if len(s.tokens)-s.computed == 1 && s.computed > 0 {
			decodes = append(decodes, s)
		} else {
			prefills = append(prefills, s)
		}
	}
	budget := e.cfg.MaxPrefillTokens
	if e.cfg.ChunkedPrefillSize > 0 {
		budget = min(budget, e.cfg.ChunkedPrefillSize)
	}
	e.batch.Chunks = e.batch.Chunks[:0]
	e.chunkSeq = e.chunkSeq[:0]
	var prefillTokens int
	var err error
	if e.cfg.EnableMixedChunk {
		// Decode tokens first (they are cheap and latency-bound), then
		// prefill chunks in the rest of the budget.
		if err := e.reserveDecodes(decodes); err != nil {
			return err
		}
		prefillTokens, err = e.planPrefills(prefills, max(budget-len(e.batch.Chunks), 1))
	} else {
		// SGLang's default: a step is all prefill when a prompt is
		// waiting for it, else all decode.
		prefillTokens, err = e.planPrefills(prefills, budget)
		if err == nil && len(e.batch.Chunks) == 0 {
			err = e.reserveDecodes(decodes)
		}
	}
	if err != nil {
		return err
	}
	if len(e.batch.Chunks) == 0 {
		return nil
	}
	decodeCount := len(e.batch.Chunks)
	for _, ch := range e.batch.Chunks {
		if len(ch.Tokens) > 1 || ch.Pos == 0 {
			decodeCount--
		}
	}

	start := time.Now()
	e.stepBeg.Store(start.UnixNano())
	err = e.r.Forward(&e.batch, &e.logits)
	e.stepBeg.Store(0)
	dur := time.Since(start)
	if err != nil {
		return fmt.Errorf("engine: forward step: %w", err)
	}
	picked := len(e.logits.Picks) > 0
	if got := max(len(e.logits.Rows), len(e.logits.Picks)); got != len(e.batch.Chunks) || picked && len(e.logits.Rows) > 0 {
		return fmt.Errorf("engine: forward step returned %d logits entries and %d picks for %d chunks", len(e.logits.Rows), len(e.logits.Picks), len(e.batch.Chunks))
	}
	e.st.Steps++
	e.st.LastStepDuration = dur
	e.st.StepDurationTotal += dur
	e.st.LastStepDecodes = decodeCount
	e.st.LastStepTokens = prefillTokens + decodeCount
	e.st.PromptTokens += uint64(prefillTokens)

	var ended []*seq
	for i, ch := range e.batch.Chunks {
		s := e.chunkSeq[i]
		if s.generated > 0 && len(ch.Tokens) == 1 {
			s.decodeStepTime += dur
		}
		if picked {
			// every chunk asked for its pick only (decode steps)
			s.computed += len(ch.Tokens)
			s.u = -1
			pk := pick{s: s, done: true, tok: Token{ID: e.logits.Picks[i].ID}}
			if pk.tok.ID < 0 {
				pk.err = sample.ErrNoToken
			} else if s.req.Params.Logprobs {
				pk.tok.Logprob = float32(e.logits.Picks[i].Logprob)
			}
			e.pending = append(e.pending, pk)
			continue
		}
		rows := e.logits.Rows[i]
		want := 1
		if ch.AllLogits {
			want = len(ch.Tokens)
		}
		if len(rows) != want {
			return fmt.Errorf("engine: forward step returned %d logits rows for chunk %d, want %d", len(rows), i, want)
		}
		for _, r := range rows {
			if len(r) != e.info.VocabSize {
				return fmt.Errorf("engine: logits row of width %d, want %d", len(r), e.info.VocabSize)
			}
		}
		if ch.AllLogits {
			e.collectPromptLogprobs(s, ch, rows)
		}
		s.computed += len(ch.Tokens)
		if s.branch > 0 && s.computed >= s.branch {
			e.cacheBranch(s)
		}
		if s.computed < len(s.tokens) {
			continue // a prefill chunk that is not the last
		}
		if s.req.Params.PromptLogprobs && !s.promptDone {
			s.promptDone = true
			s.stream.pushPrompt(s.promptLP)
			s.promptLP = promptLogprobs{}
		}
		if s.req.Params.PromptOnly {
			// scored, nothing to generate
			e.release(s)
			e.finish(s, Finish{Reason: FinishLength, MatchedStop: -1})
			ended = append(ended, s)
			continue
		}
		e.pending = append(e.pending, pick{s: s, row: rows[len(rows)-1]})
	}
	e.drawAll()
	for _, pk := range e.pending {
		if e.apply(pk.s, pk.tok, pk.err) {
			ended = append(ended, pk.s)
		}
	}
	clear(e.pending)
	e.pending = e.pending[:0]
	for _, s := range ended {
		e.running = slices.DeleteFunc(e.running, func(x *seq) bool { return x == s })
	}
	return nil
}

// collectPromptLogprobs records log P(prompt[j+1] | prompt[..j]) for the
// chunk's positions, with the most likely tokens and the requested ones
// when asked for.
func (e *Engine) collectPromptLogprobs(s *seq, ch model.Chunk, rows [][]float32) {
	p := &s.req.Params
	var sm *sample.Sampler
	if p.PromptTopLogprobs > 0 {
		if len(e.sms) == 0 {
			e.sms = make([]sample.Sampler, 1)
		}
		sm = &e.sms[0]
	}
	lp := &s.promptLP
	for j, row := range rows {
		next := ch.Pos + j + 1
		if next >= s.promptLen {
			break
		}
		mx, lse := sample.LogSumExp(row)
		lp.lp = append(lp.lp, TokenLogprob{ID: s.tokens[next], Logprob: sample.Logprob(row, s.tokens[next], mx, lse)})
		if sm != nil {
			lp.top = append(lp.top, topN(sm, row, p.PromptTopLogprobs, mx, lse))
		}
		if len(p.TokenIDsLogprob) > 0 {
			lp.ids = append(lp.ids, idLogprobs(row, p.TokenIDsLogprob, mx, lse))
		}
	}
}

// pick is one sequence's next-token draw in a step: the logits row in,
// the token (or the error) out.
type pick struct {
	s    *seq
	row  []float32
	done bool // the runner picked (model.Logits.Picks): nothing to draw
	tok  Token
	err  error
}

// drawAll draws the next token of every pending sequence. Each sequence
// has its own random stream and penalties, so the draws are independent:
// with several sequences they run on up to GOMAXPROCS goroutines (a top-p
// draw over a 152k vocabulary takes milliseconds), each with its own
// Sampler scratch, and the result is the same as drawing them in order.
func (e *Engine) drawAll() {
	n := len(e.pending)
	workers := min(n, runtime.GOMAXPROCS(0))
	if len(e.sms) < workers {
		e.sms = append(e.sms, make([]sample.Sampler, workers-len(e.sms))...)
	}
	if workers <= 1 {
		for i := range e.pending {
			e.draw(&e.sms[0], &e.pending[i])
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(sm *sample.Sampler) {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				e.draw(sm, &e.pending[i])
			}
		}(&e.sms[w])
	}
	wg.Wait()
}

// draw picks pk.s's next token from pk.row, with its logprobs when asked.
// It touches only pk and pk.s's sampling state.
func (e *Engine) draw(sm *sample.Sampler, pk *pick) {
	if pk.done {
		return
	}
	s, row := pk.s, pk.row
	p := &s.req.Params
	s.smp.Ban = nil
	if s.generated < p.MinNewTokens {
		s.smp.Ban = s.stops
	}
	var t int32
	var err error
	if s.u >= 0 {
		t, err = sm.SampleAt(s.smp, row, s.u) // the value the runner was handed
		s.u = -1
	} else {
		t, err = sm.Sample(s.smp, row)
	}
	if err != nil {
		pk.err = err
		return
	}
	pk.tok = Token{ID: t}
	if p.Logprobs || p.TopLogprobs > 0 || len(p.TokenIDsLogprob) > 0 {
		mx, lse := sample.LogSumExp(row)
		pk.tok.Logprob = sample.Logprob(row, t, mx, lse)
		if p.TopLogprobs > 0 {
			pk.tok.Top = topN(sm, row, p.TopLogprobs, mx, lse)
		}
		if len(p.TokenIDsLogprob) > 0 {
			pk.tok.IDs = idLogprobs(row, p.TokenIDsLogprob, mx, lse)
		}
	}
}

// apply records s's drawn token (or ends s on a draw error) and reports
// whether s ended.
func (e *Engine) apply(s *seq, tok Token, err error) bool {
	if err != nil {
		e.release(s)
		e.finish(s, Finish{Reason: FinishAbort, MatchedStop: -1, Err: err})
		return true
	}
	p := &s.req.Params
	t := tok.ID
	s.smp.Accept(t)
	s.tokens = append(s.tokens, t)
	s.generated++
	e.st.GenerationTokens++
	s.stream.push(tok)

	switch {
	case s.stops[t] && s.generated >= p.MinNewTokens:
		e.release(s)
		e.finish(s, Finish{Reason: FinishStop, MatchedStop: t})
	case s.generated >= s.maxNew || len(s.tokens) >= e.MaxSequenceTokens():
		e.release(s)
		e.finish(s, Finish{Reason: FinishLength, MatchedStop: -1})
	default:
		return false
	}
	return true
}

func (e *Engine) publishState() {
	e.st.Running = len(e.running)
	e.st.Queued = len(e.waiting)
	e.st.UsedTokens = e.budget - e.r.FreeTokens()
	if e.pc != nil {
		e.st.CachedTokens = e.pc.CachedPrefixTokens()
	}
	e.publish()
}
