package servebench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// BenchConfig configures a serving benchmark. The field meanings and
// defaults follow sglang.bench_serving with --dataset-name random or
// generated-shared-prefix.
type BenchConfig struct {
	BaseURL string
	APIKey  string
	// Backend is "sglang" (streaming /generate with input_ids, the
	// default) or "sglang-oai" (streaming /v1/completions with token-id
	// prompts; output lengths from the usage chunk).
	Backend string
	// Model is sent as "model" by sglang-oai ("" leaves it out: the
	// server's default).
	Model string
	// Dataset is DatasetRandom ("" too) or DatasetSharedPrefix.
	Dataset string
	// SharedPrefix shapes the generated-shared-prefix dataset (NumPrompts,
	// InputLen, OutputLen and RangeRatio are then unused, as in SGLang).
	SharedPrefix SharedPrefixConfig
	// FlushCache empties the server's prefix cache (POST /flush_cache)
	// after the warm-up, so the run starts cold (--flush-cache).
	FlushCache bool
	NumPrompts int
	// InputLen and OutputLen are the largest prompt and output lengths;
	// each request's are drawn uniformly from [max(len×RangeRatio, 1), len].
	InputLen, OutputLen int
	RangeRatio          float64
	// RequestRate is the mean arrival rate in requests per second
	// (Poisson arrivals); 0 or +Inf sends every request at once.
	RequestRate float64
	// MaxConcurrency bounds the requests in flight (0: no bound).
	MaxConcurrency int
	// Vocab bounds the random prompt ids; 0: the server's vocab_size from
	// /get_model_info.
	Vocab int
	Seed  uint64
	// DisableIgnoreEOS lets requests stop at EOS (by default they run to
	// their output length, as in sglang.bench_serving).
	DisableIgnoreEOS bool
	// Warmup is the number of single requests sent (and not counted)
	// before the run.
	Warmup int
	// ExtraBody is merged into every request body, over the defaults
	// (sglang.bench_serving's --extra-request-body): with the sglang
	// backend, sampling settings ("temperature", "top_p", ...) and the keys
	// of a "sampling_params" object go into the request's sampling_params.
	ExtraBody map[string]any
	Client    *http.Client // nil: a client with enough idle connections
}

// RequestMetrics is one request's outcome.
type RequestMetrics struct {
	InputLen  int             `json:"input_len"`
	OutputLen int             `json:"output_len"`
	TTFT      time.Duration   `json:"ttft_ns"`
	Latency   time.Duration   `json:"latency_ns"`
	ITL       []time.Duration `json:"itl_ns"`
	// CachedTokens is the prompt tokens the server's prefix cache
	// supplied, from /generate's meta_info.cached_tokens or the OpenAI
	// usage.prompt_tokens_details.cached_tokens; CacheReported says
	// whether the response carried it.
	CachedTokens  int    `json:"cached_tokens"`
	CacheReported bool   `json:"-"`
	Err           string `json:"error,omitempty"`
}

// Stats summarizes a latency distribution in milliseconds (percentiles
// interpolated linearly, as numpy.percentile).
type Stats struct {
	Mean   float64 `json:"mean_ms"`
	Median float64 `json:"median_ms"`
	Std    float64 `json:"std_ms"`
	P90    float64 `json:"p90_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

// BenchResult is a benchmark's summary, in sglang.bench_serving's terms.
type BenchResult struct {
	Backend        string  `json:"backend"`
	Dataset        string  `json:"dataset_name"`
	RequestRate    float64 `json:"-"`            // +Inf when unbounded
	Rate           string  `json:"request_rate"` // RequestRate as text ("inf")
	MaxConcurrency int     `json:"max_concurrency"`
	InputLen       int     `json:"random_input_len"`
	OutputLen      int     `json:"random_output_len"`
	RangeRatio     float64 `json:"random_range_ratio"`
	// SharedPrefix is the generated-shared-prefix shape (nil otherwise).
	SharedPrefix *SharedPrefixConfig `json:"gsp,omitempty"`
	Completed    int                 `json:"completed"`
	Failed       int                 `json:"failed"`
	// Duration runs from the first request sent to the last answered.
	Duration          time.Duration `json:"duration_ns"`
	TotalInput        int           `json:"total_input_tokens"`
	TotalOutput       int           `json:"total_output_tokens"`
	RequestThroughput float64       `json:"request_throughput"`
	InputThroughput   float64       `json:"input_throughput"`
	OutputThroughput  float64       `json:"output_throughput"`
	TotalThroughput   float64       `json:"total_throughput"`
	// Concurrency is the mean number of requests in flight: the sum of
	// the latencies over the duration.
	Concurrency float64 `json:"concurrency"`
	E2E         Stats   `json:"e2e_latency"`
	TTFT        Stats   `json:"ttft"`
	// TPOT is per request: (latency − TTFT) / (output tokens − 1).
	TPOT Stats `json:"tpot"`
	// ITL is the time between consecutive streamed chunks that carry new
	// tokens, over all requests.
	ITL Stats `json:"itl"`
	// The prefix cache; nil where the server does not report the figure
	// (written "n/a"). CachedTokens sums the completed requests'
	// cached_tokens and CacheHitRate is CachedTokens / TotalInput.
	// PrefillTokens is the prompt tokens the server computed during the
	// run (the change of /get_server_info's prompt_tokens_total, a kt
	// field). ServerCacheHitRate is /metrics' sglang:cache_hit_rate after
	// the run (since the server started, warm-up included).
	CachedTokens       *int             `json:"cached_tokens"`
	CacheHitRate       *float64         `json:"cache_hit_rate"`
	PrefillTokens      *int             `json:"server_prefill_tokens"`
	ServerCacheHitRate *float64         `json:"server_cache_hit_rate"`
	FirstErrors        []string         `json:"errors,omitempty"`
	Requests           []RequestMetrics `json:"-"`
}

type benchRequest struct {
	ids       []int
	outputLen int
	// group and prefixLen: the shared-prefix group and its system
	// prompt's length (generated-shared-prefix only).
	group, prefixLen int
}

// Bench runs the serving benchmark.
func Bench(ctx context.Context, cfg BenchConfig) (*BenchResult, error) {
	if cfg.Backend == "" {
		cfg.Backend = "sglang"
	}
	if cfg.Backend != "sglang" && cfg.Backend != "sglang-oai" {
		return nil, fmt.Errorf("servebench: backend %q: want sglang or sglang-oai", cfg.Backend)
	}
	switch cfg.Dataset {
	case "", DatasetRandom:
		cfg.Dataset = DatasetRandom
		if cfg.NumPrompts <= 0 || cfg.InputLen <= 0 || cfg.OutputLen <= 0 {
			return nil, fmt.Errorf("servebench: number of prompts (%d), input length (%d) and output length (%d) must be positive", cfg.NumPrompts, cfg.InputLen, cfg.OutputLen)
		}
		if cfg.RangeRatio < 0 || cfg.RangeRatio > 1 || math.IsNaN(cfg.RangeRatio) {
			return nil, fmt.Errorf("servebench: range ratio %v: want a value in [0, 1]", cfg.RangeRatio)
		}
	case DatasetSharedPrefix:
		if err := cfg.SharedPrefix.validate(); err != nil {
			return nil, err
		}
		cfg.NumPrompts = cfg.SharedPrefix.NumGroups * cfg.SharedPrefix.PromptsPerGroup
	default:
		return nil, fmt.Errorf("servebench: dataset %q: want %s or %s", cfg.Dataset, DatasetRandom, DatasetSharedPrefix)
	}
	if cfg.RequestRate < 0 || math.IsNaN(cfg.RequestRate) {
		return nil, fmt.Errorf("servebench: request rate %v: want a positive rate or inf", cfg.RequestRate)
	}
	if cfg.RequestRate == 0 {
		cfg.RequestRate = math.Inf(1)
	}
	if cfg.MaxConcurrency < 0 {
		return nil, fmt.Errorf("servebench: max concurrency %d: want 0 (no bound) or more", cfg.MaxConcurrency)
	}
	conns := cfg.NumPrompts
	if cfg.MaxConcurrency > 0 {
		conns = cfg.MaxConcurrency
	}
	c := newClient(cfg.BaseURL, cfg.APIKey, cfg.Client, conns)
	vocab, err := c.vocab(ctx, cfg.Vocab)
	if err != nil {
		return nil, err
	}
	rng := newRNG(cfg.Seed)
	var reqs []benchRequest
	if cfg.Dataset == DatasetSharedPrefix {
		reqs = sharedPrefixRequests(rng, cfg.SharedPrefix, vocab)
	} else {
		reqs = randomRequests(rng, cfg.NumPrompts, cfg.InputLen, cfg.OutputLen, cfg.RangeRatio, vocab)
	}

	for i := range cfg.Warmup {
		w := reqs[i%len(reqs)]
		if m := c.send(ctx, &cfg, benchRequest{ids: w.ids, outputLen: min(w.outputLen, 16)}); m.Err != "" {
			return nil, fmt.Errorf("servebench: warm-up request failed: %s", m.Err)
		}
	}
	if cfg.FlushCache {
		resp, err := c.do(ctx, "/flush_cache", map[string]any{})
		if err != nil {
			return nil, fmt.Errorf("servebench: flushing the cache: %w", err)
		}
		resp.Body.Close()
	}
	prefillBefore, prefillKnown := c.prefillTokens(ctx)

	var sem chan struct{}
	if cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	out := make([]RequestMetrics, len(reqs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, r := range reqs {
		if i > 0 && !math.IsInf(cfg.RequestRate, 1) {
			// Poisson arrivals: exponential gaps of mean 1/rate.
			gap := time.Duration(rng.ExpFloat64() / cfg.RequestRate * float64(time.Second))
			select {
			case <-time.After(gap):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			if sem != nil {
				select {
				case sem <- struct{}{}:
					defer func() { <-sem }()
				case <-ctx.Done():
					out[i] = RequestMetrics{InputLen: len(r.ids), Err: ctx.Err().Error()}
					return
				}
			}
			out[i] = c.send(ctx, &cfg, r)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := summarize(out, time.Since(start))
	res.Backend, res.RequestRate, res.MaxConcurrency = cfg.Backend, cfg.RequestRate, cfg.MaxConcurrency
	res.Rate = rateText(cfg.RequestRate)
	res.Dataset = cfg.Dataset
	if cfg.Dataset == DatasetSharedPrefix {
		sp := cfg.SharedPrefix
		res.SharedPrefix = &sp
	} else {
		res.InputLen, res.OutputLen, res.RangeRatio = cfg.InputLen, cfg.OutputLen, cfg.RangeRatio
	}
	if after, ok := c.prefillTokens(ctx); ok && prefillKnown && after >= prefillBefore {
		n := after - prefillBefore
		res.PrefillTokens = &n
	}
	if m, err := c.metrics(ctx); err == nil {
		if v, ok := m["sglang:cache_hit_rate"]; ok {
			res.ServerCacheHitRate = &v
		}
	}
	return res, nil
}

// newRNG is the generator of prompts, lengths and arrival gaps.
func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6b74)) }

// randomRequests draws the prompts and output lengths as
// sglang.bench_serving's random dataset does (lengths uniform in
// [max(len×ratio, 1), len]), with token ids uniform below vocab.
func randomRequests(rng *rand.Rand, n, inputLen, outputLen int, ratio float64, vocab int) []benchRequest {
	draw := func(hi int) int {
		lo := max(int(float64(hi)*ratio), 1)
		return lo + rng.IntN(hi-lo+1)
	}
	out := make([]benchRequest, n)
	for i := range out {
		ids := make([]int, draw(inputLen))
		for j := range ids {
			ids[j] = rng.IntN(vocab)
		}
		out[i] = benchRequest{ids: ids, outputLen: draw(outputLen)}
	}
	return out
}

// send runs one streaming request and times its chunks.
func (c *client) send(ctx context.Context, cfg *BenchConfig, r benchRequest) RequestMetrics {
	m := RequestMetrics{InputLen: len(r.ids)}
	var path string
	var body map[string]any
	if cfg.Backend == "sglang" {
		path = "/generate"
		body = map[string]any{"input_ids": r.ids, "stream": true, "sampling_params": map[string]any{
			"max_new_tokens": r.outputLen, "temperature": 0, "ignore_eos": !cfg.DisableIgnoreEOS}}
	} else {
		path = "/v1/completions"
		body = map[string]any{"prompt": r.ids, "max_tokens": r.outputLen, "temperature": 0, "stream": true,
			"ignore_eos": !cfg.DisableIgnoreEOS, "stream_options": map[string]any{"include_usage": true}}
		if cfg.Model != "" {
			body["model"] = cfg.Model
		}
	}
	mergeExtra(body, cfg.ExtraBody, cfg.Backend == "sglang")
	start := time.Now()
	last := start
	resp, err := c.do(ctx, path, body)
	if err != nil {
		m.Err = err.Error()
		return m
	}
	defer resp.Body.Close()
	// chunk records the arrival of a chunk that brings the output to n
	// tokens (n < 0: some, count unknown until the usage chunk).
	tokens := 0
	chunk := func(n int) {
		if n >= 0 && n <= tokens {
			return
		}
		now := time.Now()
		if m.TTFT == 0 {
			m.TTFT = now.Sub(start)
		} else {
			m.ITL = append(m.ITL, now.Sub(last))
		}
		last = now
		if n >= 0 {
			tokens = n
		}
	}
	err = readSSE(resp.Body, func(data []byte) error {
		if cfg.Backend == "sglang" {
			var ev struct {
				OutputIDs []int32 `json:"output_ids"`
				Meta      struct {
					CompletionTokens *int `json:"completion_tokens"`
					CachedTokens     *int `json:"cached_tokens"`
				} `json:"meta_info"`
			}
			if err := json.Unmarshal(data, &ev); err != nil {
				return fmt.Errorf("%s: bad event %.200s: %w", path, data, err)
			}
			n := len(ev.OutputIDs)
			if ev.Meta.CompletionTokens != nil {
				n = *ev.Meta.CompletionTokens
			}
			if ev.Meta.CachedTokens != nil {
				m.CachedTokens, m.CacheReported = *ev.Meta.CachedTokens, true
			}
			chunk(n)
			return nil
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails *struct {
					CachedTokens *int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("%s: bad event %.200s: %w", path, data, err)
		}
		if len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
			chunk(-1)
		}
		if ev.Usage != nil {
			tokens = ev.Usage.CompletionTokens
			if d := ev.Usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
				m.CachedTokens, m.CacheReported = *d.CachedTokens, true
			}
		}
		return nil
	})
	m.Latency = time.Since(start)
	m.OutputLen = tokens
	if err != nil {
		m.Err = err.Error()
	} else if m.TTFT == 0 {
		m.Err = fmt.Sprintf("%s: the stream carried no output", path)
	}
	return m
}

// summarize aggregates the requests' metrics.
func summarize(reqs []RequestMetrics, dur time.Duration) *BenchResult {
	res := &BenchResult{Duration: dur, Requests: reqs}
	var e2e, ttft, tpot, itl []float64
	cached, reported := 0, false
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, r := range reqs {
		if r.Err != "" {
			res.Failed++
			if len(res.FirstErrors) < 5 {
				res.FirstErrors = append(res.FirstErrors, r.Err)
			}
			continue
		}
		res.Completed++
		if r.CacheReported {
			cached += r.CachedTokens
			reported = true
		}
		res.TotalInput += r.InputLen
		res.TotalOutput += r.OutputLen
		e2e = append(e2e, ms(r.Latency))
		ttft = append(ttft, ms(r.TTFT))
		if r.OutputLen > 1 {
			tpot = append(tpot, ms(r.Latency-r.TTFT)/float64(r.OutputLen-1))
		}
		for _, d := range r.ITL {
			itl = append(itl, ms(d))
		}
	}
	if s := dur.Seconds(); s > 0 {
		res.RequestThroughput = float64(res.Completed) / s
		res.InputThroughput = float64(res.TotalInput) / s
		res.OutputThroughput = float64(res.TotalOutput) / s
		res.TotalThroughput = float64(res.TotalInput+res.TotalOutput) / s
		var sum float64
		for _, v := range e2e {
			sum += v
		}
		res.Concurrency = sum / 1000 / s
	}
	res.E2E, res.TTFT, res.TPOT, res.ITL = stats(e2e), stats(ttft), stats(tpot), stats(itl)
	if reported {
		res.CachedTokens = &cached
		if res.TotalInput > 0 {
			r := float64(cached) / float64(res.TotalInput)
			res.CacheHitRate = &r
		}
	}
	return res
}

// stats summarizes values (zero Stats when empty).
func stats(v []float64) Stats {
	if len(v) == 0 {
		return Stats{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(len(s))
	var sq float64
	for _, x := range s {
		sq += (x - mean) * (x - mean)
	}
	return Stats{Mean: mean, Median: percentile(s, 50), Std: math.Sqrt(sq / float64(len(s))),
		P90: percentile(s, 90), P95: percentile(s, 95), P99: percentile(s, 99), Max: s[len(s)-1]}
}

// percentile of sorted values, interpolating linearly between the two
// nearest ranks (numpy's default).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 1 {
		return sorted[0]
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := rank - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Write prints the result in sglang.bench_serving's layout.
func (r *BenchResult) Write(w io.Writer) {
	line := func(name string, v any) {
		switch x := v.(type) {
		case float64:
			fmt.Fprintf(w, "%-40s %-10.2f\n", name+":", x)
		default:
			fmt.Fprintf(w, "%-40s %-10v\n", name+":", x)
		}
	}
	rate := rateText(r.RequestRate)
	conc := "not set"
	if r.MaxConcurrency > 0 {
		conc = fmt.Sprint(r.MaxConcurrency)
	}
	fmt.Fprintf(w, "%s\n", center(" Serving Benchmark Result ", '='))
	line("Backend", r.Backend)
	line("Traffic request rate", rate)
	line("Max request concurrency", conc)
	if sp := r.SharedPrefix; sp != nil {
		line("Dataset", DatasetSharedPrefix)
		line("Groups x prompts per group", fmt.Sprintf("%d x %d", sp.NumGroups, sp.PromptsPerGroup))
		line("System/question/output len (ratio)", fmt.Sprintf("%d/%d/%d (%g)", sp.SystemPromptLen, sp.QuestionLen, sp.OutputLen, sp.RangeRatio))
	} else {
		line("Random input/output len (ratio)", fmt.Sprintf("%d/%d (%g)", r.InputLen, r.OutputLen, r.RangeRatio))
	}
	line("Successful requests", r.Completed)
	line("Failed requests", r.Failed)
	line("Benchmark duration (s)", r.Duration.Seconds())
	line("Total input tokens", r.TotalInput)
	line("Total generated tokens", r.TotalOutput)
	line("Request throughput (req/s)", r.RequestThroughput)
	line("Input token throughput (tok/s)", r.InputThroughput)
	line("Output token throughput (tok/s)", r.OutputThroughput)
	line("Total token throughput (tok/s)", r.TotalThroughput)
	line("Concurrency", r.Concurrency)
	fmt.Fprintln(w, center("End-to-End Latency", '-'))
	line("Mean E2E Latency (ms)", r.E2E.Mean)
	line("Median E2E Latency (ms)", r.E2E.Median)
	line("P90 E2E Latency (ms)", r.E2E.P90)
	line("P99 E2E Latency (ms)", r.E2E.P99)
	fmt.Fprintln(w, center("Time to First Token", '-'))
	line("Mean TTFT (ms)", r.TTFT.Mean)
	line("Median TTFT (ms)", r.TTFT.Median)
	line("Std TTFT (ms)", r.TTFT.Std)
	line("P99 TTFT (ms)", r.TTFT.P99)
	fmt.Fprintln(w, center("Time per Output Token (excl. 1st token)", '-'))
	line("Mean TPOT (ms)", r.TPOT.Mean)
	line("Median TPOT (ms)", r.TPOT.Median)
	line("P99 TPOT (ms)", r.TPOT.P99)
	fmt.Fprintln(w, center("Inter-Token Latency", '-'))
	line("Mean ITL (ms)", r.ITL.Mean)
	line("Median ITL (ms)", r.ITL.Median)
	line("P95 ITL (ms)", r.ITL.P95)
	line("P99 ITL (ms)", r.ITL.P99)
	line("Max ITL (ms)", r.ITL.Max)
	fmt.Fprintln(w, center("Prefix Cache", '-'))
	line("Cached prompt tokens", optInt(r.CachedTokens))
	line("Cache hit rate (cached/input)", optFloat(r.CacheHitRate))
	line("Prefill tokens computed (server)", optInt(r.PrefillTokens))
	line("Server cache hit rate (/metrics)", optFloat(r.ServerCacheHitRate))
	fmt.Fprintln(w, center("", '='))
	for _, e := range r.FirstErrors {
		fmt.Fprintln(w, "error:", e)
	}
}

// optInt and optFloat write a figure the server may not report: "n/a"
// when it does not.
func optInt(v *int) any {
	if v == nil {
		return "n/a"
	}
	return *v
}

func optFloat(v *float64) any {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.4f", *v)
}

func rateText(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return fmt.Sprintf("%g", r)
}

func center(s string, fill byte) string {
	const width = 50
	if len(s) >= width {
		return s
	}
	left := (width - len(s)) / 2
	b := make([]byte, 0, width)
	for range left {
		b = append(b, fill)
	}
	b = append(b, s...)
	for len(b) < width {
		b = append(b, fill)
	}
	return string(b)
}

// samplingKeys are the request keys that /generate takes inside
// sampling_params.
var samplingKeys = map[string]bool{
	"temperature": true, "top_p": true, "top_k": true, "min_p": true, "max_new_tokens": true, "ignore_eos": true,
	"frequency_penalty": true, "presence_penalty": true, "repetition_penalty": true, "stop": true, "stop_token_ids": true,
	"min_new_tokens": true, "n": true, "json_schema": true, "regex": true, "sampling_seed": true,
}

// mergeExtra copies extra into body; for /generate (generate true) the
// sampling settings, and the keys of extra's "sampling_params", go into
// body's sampling_params.
func mergeExtra(body, extra map[string]any, generate bool) {
	sp, _ := body["sampling_params"].(map[string]any)
	if !generate {
		sp = nil
	}
	for k, v := range extra {
		m, isMap := v.(map[string]any)
		switch {
		case sp != nil && k == "sampling_params" && isMap:
			maps.Copy(sp, m)
		case sp != nil && samplingKeys[k]:
			sp[k] = v
		default:
			body[k] = v
			if k == "sampling_params" {
				sp = nil // replaced by a value that is not an object
			}
		}
	}
}
