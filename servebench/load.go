package servebench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// LoadConfig configures a soak test.
type LoadConfig struct {
	BaseURL  string
	APIKey   string
	Clients  int           // concurrent clients
	Duration time.Duration // how long they send requests
	// MaxTokens bounds each request's output (1..MaxTokens, random).
	MaxTokens int
	// Vocab bounds the random prompt ids; 0: the server's vocab_size
	// from /get_model_info.
	Vocab int
	// Chat adds chat requests to the mix (the server needs a tokenizer
	// and a chat template).
	Chat bool
	// Drain is how long to wait after the run before reading the memory
	// again, so abandoned streams are freed (default 2s).
	Drain  time.Duration
	Client *http.Client // nil: a client with Clients idle connections
	// Attackers send the hostile mix (Attacks) beside the clients, one
	// request at a time each; 0: none.
	Attackers int
}

// LoadResult is what a soak test saw.
type LoadResult struct {
	Clients   int
	Elapsed   time.Duration
	Served    int64 // requests answered in full
	Errors    int64
	Abandoned int64 // streams closed after the first event (client disconnects)
	Tokens    int64 // output tokens asked for by the served requests
	// FirstErrors holds up to 5 error messages.
	FirstErrors []string
	// Before and After are the server's /metrics values at the start and
	// after the run (and Drain).
	Before, After map[string]float64
	// PeakRSS is the highest resident memory /metrics reported during the
	// run (sampled every half second).
	PeakRSS float64
	// Attacks are the outcomes of the hostile mix, per attack (with
	// Attackers).
	Attacks []AttackStats
}

// LoadSeries are the /metrics series Write compares before and after.
var LoadSeries = []string{"process_resident_memory_bytes", "go_memstats_heap_inuse_bytes", "go_goroutines", "sglang:num_running_reqs", "sglang:num_used_tokens"}

type counters struct {
	ok, errs, abandoned, tokens atomic.Int64
	mu                          sync.Mutex
	firstErr                    []string
}

func (c *counters) fail(format string, a ...any) {
	c.errs.Add(1)
	c.mu.Lock()
	if len(c.firstErr) < 5 {
		c.firstErr = append(c.firstErr, fmt.Sprintf(format, a...))
	}
	c.mu.Unlock()
}

// Load runs the soak test: each client loops over a random mix of
// /generate and /v1/completions requests with token-id prompts (they work
// with or without a tokenizer), streaming and not, with random lengths and
// temperatures; one request in five is a stream the client abandons after
// its first event. With Chat, one in three is a chat request.
func Load(ctx context.Context, cfg LoadConfig) (*LoadResult, error) {
	if cfg.Clients <= 0 || cfg.Duration <= 0 || cfg.MaxTokens <= 0 {
		return nil, fmt.Errorf("servebench: clients (%d), duration (%s) and max tokens (%d) must be positive", cfg.Clients, cfg.Duration, cfg.MaxTokens)
	}
	if cfg.Drain == 0 {
		cfg.Drain = 2 * time.Second
	}
	c := newClient(cfg.BaseURL, cfg.APIKey, cfg.Client, cfg.Clients)
	vocab, err := c.vocab(ctx, cfg.Vocab)
	if err != nil {
		return nil, err
	}
	res := &LoadResult{Clients: cfg.Clients}
	if res.Before, err = c.metrics(ctx); err != nil {
		return nil, err
	}
	var cnt counters
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	peak := make(chan float64, 1)
	go func() { peak <- c.peakRSS(runCtx, res.Before["process_resident_memory_bytes"]) }()
	if cfg.Attackers > 0 {
		wg.Go(func() {
			res.Attacks, _ = runAttacks(runCtx, cfg.BaseURL, cfg.APIKey, vocab, cfg.Attackers)
		})
	}
	for i := range cfg.Clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for runCtx.Err() == nil {
				c.one(runCtx, rng, cfg.MaxTokens, vocab, cfg.Chat, &cnt)
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.PeakRSS = <-peak
	select {
	case <-time.After(cfg.Drain):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if res.After, err = c.metrics(ctx); err != nil {
		return nil, err
	}
	res.Served, res.Errors, res.Abandoned, res.Tokens = cnt.ok.Load(), cnt.errs.Load(), cnt.abandoned.Load(), cnt.tokens.Load()
	res.FirstErrors = cnt.firstErr
	return res, nil
}

// peakRSS samples the server's resident memory every half second until
// ctx ends and returns the highest value seen (at least from).
func (c *client) peakRSS(ctx context.Context, from float64) float64 {
	peak := from
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return peak
		case <-t.C:
			// A fresh context: the run's may end mid-read.
			mctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			m, err := c.metrics(mctx)
			cancel()
			if err == nil {
				peak = max(peak, m["process_resident_memory_bytes"])
			}
		}
	}
}

// vocab returns v, or the server's vocab_size when v is 0.
func (c *client) vocab(ctx context.Context, v int) (int, error) {
	if v > 0 {
		return v, nil
	}
	var info struct {
		VocabSize int `json:"vocab_size"`
	}
	if err := c.getJSON(ctx, "/get_model_info", &info); err != nil {
		return 0, fmt.Errorf("servebench: reading the vocabulary size (give it with --vocab): %w", err)
	}
	if info.VocabSize <= 0 {
		return 0, errors.New("servebench: the server does not report vocab_size in /get_model_info; give it with --vocab")
	}
	return info.VocabSize, nil
}

// one sends a random request and records the outcome.
func (c *client) one(ctx context.Context, rng *rand.Rand, maxTokens, vocab int, chat bool, cnt *counters) {
	n := 1 + rng.IntN(maxTokens)
	ids := make([]int, 1+rng.IntN(48))
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	kind := rng.IntN(5)
	if chat && rng.IntN(3) == 0 {
		kind = 5
	}
	stream := kind%2 == 1
	abandon := kind == 4
	var path string
	var body map[string]any
	switch kind {
	case 0, 1, 4:
		path = "/generate"
		body = map[string]any{"input_ids": ids, "stream": stream || abandon, "sampling_params": map[string]any{"max_new_tokens": n, "temperature": rng.Float64()}}
	case 2, 3:
		path = "/v1/completions"
		body = map[string]any{"prompt": ids, "max_tokens": n, "stream": stream, "temperature": 0}
	case 5:
		path = "/v1/chat/completions"
		body = map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Say something number " + strconv.Itoa(rng.IntN(1000))}},
			"max_tokens": n, "stream": rng.IntN(2) == 0}
	}
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.do(reqCtx, path, body)
	if err != nil {
		if ctx.Err() == nil {
			cnt.fail("%s: %v", path, err)
		}
		return
	}
	defer resp.Body.Close()
	if abandon {
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil && ctx.Err() == nil {
			cnt.fail("%s: %v", path, err)
			return
		}
		cancel()
		cnt.abandoned.Add(1)
		return
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() == nil {
			cnt.fail("%s: %v", path, err)
		}
		return
	}
	if errorBody(b) {
		cnt.fail("%s: error in the body: %.200s", path, b)
		return
	}
	cnt.ok.Add(1)
	cnt.tokens.Add(int64(n))
}

// errorBody reports whether a response body (JSON, or server-sent events)
// is or carries an error object; generated text may contain the word.
func errorBody(b []byte) bool {
	for _, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(bytes.TrimPrefix(line, []byte("data:")))
		if bytes.HasPrefix(line, []byte(`{"error"`)) || bytes.HasPrefix(line, []byte(`{"object":"error"`)) {
			return true
		}
	}
	return false
}

// Write prints the result: counts, throughput, and each LoadSeries before and after.
func (r *LoadResult) Write(w io.Writer) {
	fmt.Fprintf(w, "clients %d, %s: %d requests served, %d errors, %d abandoned mid-stream (disconnects), %d tokens (%.0f tok/s)\n",
		r.Clients, r.Elapsed.Round(time.Second), r.Served, r.Errors, r.Abandoned, r.Tokens, float64(r.Tokens)/r.Elapsed.Seconds())
	for _, k := range LoadSeries {
		fmt.Fprintf(w, "  %-32s before %14.0f  after %14.0f\n", k, r.Before[k], r.After[k])
	}
	fmt.Fprintf(w, "  %-32s peak   %14.0f\n", "process_resident_memory_bytes", r.PeakRSS)
	for _, e := range r.FirstErrors {
		fmt.Fprintln(w, "  error:", e)
	}
	if len(r.Attacks) > 0 {
		fmt.Fprintln(w, "attacks (each must be refused with a 4xx or cut by the server):")
		for _, a := range r.Attacks {
			fmt.Fprintf(w, "  %-55s refused %4d  cut %4d  accepted %3d  failed %3d  slowest %s\n",
				a.Name, a.Refused, a.Cut, a.Accepted, a.Failed, a.Slowest.Round(10*time.Millisecond))
			if a.FirstFailure != "" {
				fmt.Fprintln(w, "    first:", a.FirstFailure)
			}
		}
	}
}
