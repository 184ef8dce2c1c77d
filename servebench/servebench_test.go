package servebench

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
	"github.com/ktserve/kt/server"
)

// fakeServer serves the fake model (every output token a letter).
type fakeServer struct {
	url string
}

// countingTransport counts the requests in flight, from sending one until
// its response body is closed, and keeps the most seen at once.
type countingTransport struct {
	inFlight, maxObs atomic.Int64
}

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	n := ct.inFlight.Add(1)
	for {
		m := ct.maxObs.Load()
		if n <= m || ct.maxObs.CompareAndSwap(m, n) {
			break
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		ct.inFlight.Add(-1)
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, ct: ct}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	ct   *countingTransport
	once sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.ct.inFlight.Add(-1) })
	return b.ReadCloser.Close()
}

func newFakeServer(t *testing.T, apiKey string) *fakeServer {
	t.Helper()
	script := func(tokens []int32) (int32, bool) { return 'a' + int32(len(tokens)%26), true }
	r := fakemodel.New(fakemodel.Config{Script: script, EOS: fakemodel.IMEnd, StepDelay: time.Millisecond})
	e, err := engine.New(r, engine.Config{MaxRunningRequests: 8, ChunkedPrefillSize: 64, EnableMixedChunk: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	srv, err := server.New(server.Options{Engine: e, ModelName: "fake", Tokenizer: fakemodel.Tokenizer{}, Template: fakemodel.ChatTemplate(), APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeServer{}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		<-done
	})
	fs.url = hs.URL
	return fs
}

func TestBench(t *testing.T) {
	fs := newFakeServer(t, "")
	for _, backend := range []string{"sglang", "sglang-oai"} {
		t.Run(backend, func(t *testing.T) {
			ct := &countingTransport{}
			cfg := BenchConfig{BaseURL: fs.url, Backend: backend, Client: &http.Client{Transport: ct}, NumPrompts: 24, InputLen: 40, OutputLen: 12, RangeRatio: 0.5,
				MaxConcurrency: 3, Seed: 5, Warmup: 1, ExtraBody: map[string]any{"temperature": 0.7, "top_p": 0.9}}
			res, err := Bench(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Completed != 24 || res.Failed != 0 {
				t.Fatalf("completed %d failed %d: %v", res.Completed, res.Failed, res.FirstErrors)
			}
			// The same seed draws the same requests; with ignore_eos every
			// request returns exactly its drawn length.
			vocab := 300 // the fake model's vocab_size, read from /get_model_info
			want := randomRequests(newRNG(cfg.Seed), 24, 40, 12, 0.5, vocab)
			wantIn, wantOut := 0, 0
			for i, r := range want {
				wantIn += len(r.ids)
				wantOut += r.outputLen
				got := res.Requests[i]
				if got.InputLen != len(r.ids) || got.OutputLen != r.outputLen {
					t.Errorf("request %d: lengths %d/%d, want %d/%d", i, got.InputLen, got.OutputLen, len(r.ids), r.outputLen)
				}
				if len(r.ids) < 20 || len(r.ids) > 40 || r.outputLen < 6 || r.outputLen > 12 {
					t.Errorf("request %d: lengths %d/%d outside [20,40]/[6,12]", i, len(r.ids), r.outputLen)
				}
				if got.TTFT <= 0 || got.TTFT > got.Latency || len(got.ITL) > r.outputLen-1 {
					t.Errorf("request %d: ttft %v latency %v, %d ITLs for %d tokens", i, got.TTFT, got.Latency, len(got.ITL), r.outputLen)
				}
			}
			if res.TotalInput != wantIn || res.TotalOutput != wantOut {
				t.Errorf("totals %d/%d, want %d/%d", res.TotalInput, res.TotalOutput, wantIn, wantOut)
			}
			if m := ct.maxObs.Load(); m > 3 || m < 1 {
				t.Errorf("%d requests in flight at once, want at most --max-concurrency 3", m)
			}
			if res.TTFT.Mean <= 0 || res.E2E.Mean < res.TTFT.Mean || res.TPOT.Mean <= 0 || res.ITL.Max < res.ITL.Median ||
				res.OutputThroughput <= 0 || res.Concurrency <= 0 || res.Concurrency > 3.01 {
				t.Errorf("summary: %+v", res)
			}
			var b strings.Builder
			res.Write(&b)
			for _, s := range []string{"Serving Benchmark Result", "Successful requests:                     24", "Mean TTFT (ms):", "P99 ITL (ms):", "Max request concurrency:                 3"} {
				if !strings.Contains(b.String(), s) {
					t.Errorf("report lacks %q:\n%s", s, b.String())
				}
			}
		})
	}
	// Poisson arrivals at a finite rate.
	res, err := Bench(context.Background(), BenchConfig{BaseURL: fs.url, NumPrompts: 6, InputLen: 8, OutputLen: 4, RequestRate: 200, Vocab: 256})
	if err != nil || res.Completed != 6 || res.Rate != "200" {
		t.Errorf("rate 200: %+v %v", res, err)
	}
}

func TestBenchErrors(t *testing.T) {
	fs := newFakeServer(t, "secret")
	// No key: every request is refused, and the report says so.
	res, err := Bench(context.Background(), BenchConfig{BaseURL: fs.url, NumPrompts: 3, InputLen: 8, OutputLen: 4, Vocab: 100})
	if err != nil || res.Failed != 3 || res.Completed != 0 || len(res.FirstErrors) == 0 || !strings.Contains(res.FirstErrors[0], "401") {
		t.Errorf("without the key: %+v %v", res, err)
	}
	if _, err := Bench(context.Background(), BenchConfig{BaseURL: fs.url, NumPrompts: 3, InputLen: 8, OutputLen: 4}); err == nil || !strings.Contains(err.Error(), "--vocab") {
		t.Errorf("vocab unreadable: %v", err)
	}
	if _, err := Bench(context.Background(), BenchConfig{BaseURL: fs.url, NumPrompts: 3, InputLen: 8, OutputLen: 4, Vocab: 100, Warmup: 1}); err == nil || !strings.Contains(err.Error(), "warm-up") {
		t.Errorf("warm-up failure: %v", err)
	}
	for _, cfg := range []BenchConfig{
		{NumPrompts: 0, InputLen: 1, OutputLen: 1},
		{NumPrompts: 1, InputLen: 1, OutputLen: 1, Backend: "vllm"},
		{NumPrompts: 1, InputLen: 1, OutputLen: 1, RangeRatio: 2},
		{NumPrompts: 1, InputLen: 1, OutputLen: 1, RequestRate: -1},
		{NumPrompts: 1, InputLen: 1, OutputLen: 1, MaxConcurrency: -1},
	} {
		cfg.BaseURL, cfg.Vocab = fs.url, 10
		if _, err := Bench(context.Background(), cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestLoad(t *testing.T) {
	fs := newFakeServer(t, "k")
	res, err := Load(context.Background(), LoadConfig{BaseURL: fs.url, APIKey: "k", Clients: 4, Duration: 300 * time.Millisecond, MaxTokens: 8, Chat: true, Drain: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Served == 0 || res.Errors != 0 || res.Before["go_goroutines"] == 0 || res.After["sglang:num_running_reqs"] != 0 {
		t.Errorf("%+v", res)
	}
	var b strings.Builder
	res.Write(&b)
	if !strings.Contains(b.String(), "requests served, 0 errors") || !strings.Contains(b.String(), "process_resident_memory_bytes") {
		t.Errorf("report:\n%s", b.String())
	}
	if _, err := Load(context.Background(), LoadConfig{BaseURL: fs.url, Clients: 1, Duration: time.Second, MaxTokens: 1}); err == nil {
		t.Error("no error without the API key")
	}
}

func TestStats(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Stats
	}{
		// Expected values from numpy (mean, median, std, percentile).
		{[]float64{4, 1, 3, 2}, Stats{Mean: 2.5, Median: 2.5, Std: 1.118033988749895, P90: 3.7, P95: 3.85, P99: 3.97, Max: 4}},
		{[]float64{7}, Stats{Mean: 7, Median: 7, P90: 7, P95: 7, P99: 7, Max: 7}},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 100}, Stats{Mean: 14.5, Median: 5.5, Std: 28.605069480775605, P90: 18.1, P95: 59.05, P99: 91.81, Max: 100}},
		{nil, Stats{}},
	} {
		got := stats(c.in)
		for _, p := range [][2]float64{{got.Mean, c.want.Mean}, {got.Median, c.want.Median}, {got.Std, c.want.Std}, {got.P90, c.want.P90},
			{got.P95, c.want.P95}, {got.P99, c.want.P99}, {got.Max, c.want.Max}} {
			if math.Abs(p[0]-p[1]) > 1e-9 {
				t.Errorf("stats(%v) = %+v, want %+v", c.in, got, c.want)
				break
			}
		}
	}
	res := summarize([]RequestMetrics{
		{InputLen: 10, OutputLen: 5, TTFT: 100 * time.Millisecond, Latency: 500 * time.Millisecond, ITL: []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}},
		{InputLen: 20, OutputLen: 1, TTFT: 300 * time.Millisecond, Latency: 300 * time.Millisecond},
		{InputLen: 5, Err: "boom"},
	}, 2*time.Second)
	if res.Completed != 2 || res.Failed != 1 || res.TotalInput != 30 || res.TotalOutput != 6 || res.RequestThroughput != 1 ||
		res.OutputThroughput != 3 || res.TotalThroughput != 18 || math.Abs(res.Concurrency-0.4) > 1e-9 ||
		res.TPOT.Mean != 100 || res.TTFT.Mean != 200 || res.ITL.Mean != 100 || res.E2E.Median != 400 || res.FirstErrors[0] != "boom" {
		t.Errorf("summarize: %+v", res)
	}
}

func TestMergeExtra(t *testing.T) {
	for _, c := range []struct {
		name     string
		generate bool
		extra    map[string]any
		want     string
	}{
		{"generate sampling keys", true, map[string]any{"temperature": 0.7, "top_p": 0.9, "rid": "x"},
			`{"rid":"x","sampling_params":{"max_new_tokens":8,"temperature":0.7,"top_p":0.9}}`},
		{"generate sampling_params object", true, map[string]any{"sampling_params": map[string]any{"top_k": 20, "max_new_tokens": 4}},
			`{"sampling_params":{"max_new_tokens":4,"temperature":0,"top_k":20}}`},
		{"completions", false, map[string]any{"temperature": 0.7, "top_p": 0.9},
			`{"max_tokens":8,"temperature":0.7,"top_p":0.9}`},
		{"none", true, nil, `{"sampling_params":{"max_new_tokens":8,"temperature":0}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := map[string]any{"max_tokens": 8, "temperature": 0}
			if c.generate {
				body = map[string]any{"sampling_params": map[string]any{"max_new_tokens": 8, "temperature": 0}}
			}
			mergeExtra(body, c.extra, c.generate)
			got, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}
