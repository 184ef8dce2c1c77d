package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

// withLimits sets the server's limits.
func withLimits(l Limits) func(*Options) {
	return func(o *Options) { o.Limits = l }
}

func dialServer(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// healthWithin checks that GET /health answers 200 within d.
func healthWithin(t *testing.T, url string, d time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: d, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := client.Get(url + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v after %v", err, time.Since(start))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health: %d", resp.StatusCode)
	}
}

// 300 connections that never finish a request, or finish one and stay
// idle, against a cap of 32: /health still answers, and the server closes
// every one of them.
func TestLimitsIdleConnectionsReaped(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, withLimits(Limits{
		MaxConnections: 32, ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 100 * time.Millisecond}))
	conns := make([]net.Conn, 300)
	for i := range conns {
		conns[i] = dialServer(t, ts.url)
		switch i % 3 {
		case 0: // a finished request, then idle keep-alive
			fmt.Fprint(conns[i], "GET /health HTTP/1.1\r\nHost: kt\r\n\r\n")
		case 1: // headers never finished
			fmt.Fprint(conns[i], "GET /health HTTP/1.1\r\nHost: kt\r\n")
		}
	}
	healthWithin(t, ts.url, 10*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for i, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("connection %d not closed by the server: %v", i, err)
		}
	}
	healthWithin(t, ts.url, 2*time.Second)
}

// A body sent slower than the read timeout is cut with 408; without the
// API key it is refused at once with 401 and the connection closed, not
// held while the server drains the unread body.
func TestLimitsSlowBodyCut(t *testing.T) {
	for _, c := range []struct {
		name   string
		apiKey string
		want   int
	}{
		{"read timeout", "", http.StatusRequestTimeout},
		{"unauthenticated", "key", http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) {
				o.Limits, o.APIKey = Limits{ReadTimeout: 200 * time.Millisecond}, c.apiKey
			})
			conn := dialServer(t, ts.url)
			start := time.Now()
			fmt.Fprint(conn, "POST /v1/completions HTTP/1.1\r\nHost: kt\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\"")
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer to a stalled body: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("stalled body: status %d, want %d", resp.StatusCode, c.want)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("stalled body answered after %v", el)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.Copy(io.Discard, conn); err != nil {
				t.Errorf("the connection of a stalled body is still open: %v", err)
			}
			healthWithin(t, ts.url, 2*time.Second)
		})
	}
}

// lineLog collects log lines.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *lineLog) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A client that never reads a large non-streaming response does not hold
// its handler past the write timeout.
func TestLimitsSlowReaderReleased(t *testing.T) {
	log := &lineLog{}
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) {
		o.Limits = Limits{WriteTimeout: 300 * time.Millisecond, MaxPromptBytes: 8 << 20}
		o.Logger, o.AccessLog = slog.New(slog.NewTextHandler(log, nil)), true
	})
	body, _ := json.Marshal(map[string]any{"model": modelName, "prompt": strings.Repeat("a", 6<<20)})
	c := dialServer(t, ts.url)
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	start := time.Now()
	fmt.Fprintf(c, "POST /tokenize HTTP/1.1\r\nHost: kt\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	// the bound leaves room for tokenizing 6 MiB under the race detector on
	// a loaded machine; without the write timeout the handler never returns
	for !log.has("path=/tokenize") {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the /tokenize handler is still writing to a client that does not read")
		}
		time.Sleep(20 * time.Millisecond)
	}
	healthWithin(t, ts.url, 2*time.Second)
}

// largestEncode is a tokenizer that records the longest text it encoded.
type largestEncode struct {
	fakemodel.Tokenizer
	mu  sync.Mutex
	max int
}

func (l *largestEncode) Encode(text string) []int32 {
	l.mu.Lock()
	l.max = max(l.max, len(text))
	l.mu.Unlock()
	return l.Tokenizer.Encode(text)
}

// A 30 MB prompt of spaces is refused before tokenizing (the tokenizer
// never sees more than the byte bound), on every route that tokenizes, and
// the server then serves a normal request.
func TestLimitsHugePromptRefusedUntokenized(t *testing.T) {
	tok := &largestEncode{}
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) { o.Tokenizer = tok })
	spaces, tenMB := strings.Repeat(" ", 30_000_000), strings.Repeat(" ", 10_000_000)
	const bound = "max-prompt-bytes"
	for _, tc := range []struct {
		path string
		body map[string]any
		want string // in the 400's message
	}{
		{"/v1/completions", map[string]any{"model": modelName, "prompt": spaces, "max_tokens": 1}, bound},
		{"/v1/completions", map[string]any{"model": modelName, "prompt": []string{"hi", spaces}, "max_tokens": 1}, bound},
		{"/generate", map[string]any{"text": spaces, "sampling_params": map[string]any{"max_new_tokens": 1}}, bound},
		// The template refuses strings over 16 MiB while rendering.
		{"/v1/chat/completions", map[string]any{"model": modelName, "messages": []map[string]string{{"role": "user", "content": spaces}}}, "string longer than"},
		{"/v1/chat/completions", map[string]any{"model": modelName, "messages": []map[string]string{{"role": "user", "content": tenMB}}}, bound},
		{"/tokenize", map[string]any{"model": modelName, "prompt": spaces}, bound},
	} {
		data, err := json.Marshal(tc.body)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := http.Post(ts.url+tc.path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		el := time.Since(start)
		t.Logf("%s: %v", tc.path, el)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), tc.want) {
			t.Errorf("%s: %d %.200s, want 400 saying %q", tc.path, resp.StatusCode, msg, tc.want)
		}
	}
	if bound := ts.eng.ContextLength() * PromptBytesPerToken; tok.max > bound {
		t.Errorf("tokenized a %d-byte text; the bound is %d", tok.max, bound)
	}
	code, msg := ts.post(t, "/v1/completions", map[string]any{"model": modelName, "prompt": "hello", "max_tokens": 2})
	if code != http.StatusOK {
		t.Fatalf("normal request after the refusals: %d %s", code, msg)
	}
}

// A body above the body limit is refused with 413.
func TestLimitsBodyTooLarge(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, withLimits(Limits{MaxBodyBytes: 1 << 10}))
	code, msg := ts.post(t, "/v1/completions", map[string]any{"model": modelName, "prompt": strings.Repeat("a", 2<<10)})
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), "max-request-body-bytes") {
		t.Errorf("got %d %s, want 413 naming --max-request-body-bytes", code, msg)
	}
	healthWithin(t, ts.url, 2*time.Second)
}

// Generation slower than the write timeout cuts neither a stream nor a
// non-streaming answer: the timeout runs only while the client reads.
func TestLimitsWriteTimeoutSparesSlowGeneration(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{StepDelay: 150 * time.Millisecond}, engine.Config{},
		withLimits(Limits{WriteTimeout: 100 * time.Millisecond}))
	for _, stream := range []bool{false, true} {
		start := time.Now()
		code, body := ts.post(t, "/v1/completions", map[string]any{"model": modelName, "prompt": "hello",
			"max_tokens": 4, "ignore_eos": true, "stream": stream})
		if code != http.StatusOK {
			t.Fatalf("stream=%v: %d %s", stream, code, body)
		}
		if stream && !strings.Contains(string(body), "data: [DONE]") {
			t.Errorf("stream cut: %s", body)
		}
		if el := time.Since(start); el < 4*150*time.Millisecond {
			t.Errorf("stream=%v: answered in %v, faster than the model steps", stream, el)
		}
	}
}

// A batch of 1,000 prompts asking 500 tokens with 20 top logprobs each is
// refused at once, before any work is queued, and so is a batch within the
// sequence cap whose response would pass the byte budget; the server then
// answers a normal batch.
func TestLimitsHugeBatchRefused(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	prompts := func(k int) []string {
		out := make([]string, k)
		for i := range out {
			out[i] = fmt.Sprintf("prompt %d", i)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		prompts int
		tokens  int
		want    string
	}{
		{"sequences", 1000, 500, "max-batch-sequences"},
		{"response bytes", 256, 2000, "max-response-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, msg := ts.post(t, "/generate", map[string]any{"text": prompts(tc.prompts),
				"sampling_params": map[string]any{"max_new_tokens": tc.tokens, "ignore_eos": true},
				"return_logprob":  true, "top_logprobs_num": 20})
			if took := time.Since(start); took > time.Second {
				t.Errorf("refused after %v, want well under a second", took)
			}
			if code != http.StatusBadRequest || !strings.Contains(string(msg), tc.want) {
				t.Fatalf("got %d %s, want 400 naming --%s", code, msg, tc.want)
			}
		})
	}
	code, msg := ts.post(t, "/generate", map[string]any{"text": prompts(8),
		"sampling_params": map[string]any{"max_new_tokens": 4}, "return_logprob": true, "top_logprobs_num": 2})
	var outs []map[string]any
	if code != http.StatusOK || json.Unmarshal(msg, &outs) != nil || len(outs) != 8 {
		t.Fatalf("normal batch after the refusals: %d %s", code, msg)
	}
}

// Each endpoint takes a batch exactly at the limits and refuses one
// sequence, or one token, more, naming the field and the flag.
func TestLimitsBatchBoundary(t *testing.T) {
	const seqs, tokens, top = 4, 8, 2
	budget := int64(seqs * tokens * (1 + top) * logprobEntryBytes)
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, withLimits(Limits{MaxBatchSequences: seqs, MaxResponseBytes: budget}))
	generate := func(prompts, maxTokens int) map[string]any {
		text := make([]string, prompts)
		for i := range text {
			text[i] = "Once upon"
		}
		return map[string]any{"text": text, "sampling_params": map[string]any{"max_new_tokens": maxTokens},
			"return_logprob": true, "top_logprobs_num": top}
	}
	completion := func(n, maxTokens int) map[string]any {
		return map[string]any{"model": modelName, "prompt": []string{"Once upon", "a time"}, "n": n,
			"max_tokens": maxTokens, "logprobs": top}
	}
	chat := func(n, maxTokens int) map[string]any {
		b := greedyBody("hi", maxTokens)
		b["n"], b["logprobs"], b["top_logprobs"] = n, true, top
		delete(b, "temperature")
		return b
	}
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		want       string // "" accepted, else in the 400's message
	}{
		{"generate at the limits", "/generate", generate(seqs, tokens), ""},
		{"generate one prompt more", "/generate", generate(seqs+1, 1), "--max-batch-sequences"},
		{"generate one token more", "/generate", generate(seqs, tokens+1), "sampling_params.max_new_tokens"},
		{"completions at the limits", "/v1/completions", completion(seqs/2, tokens), ""},
		{"completions n more", "/v1/completions", completion(seqs/2+1, tokens), "--max-batch-sequences"},
		{"completions one token more", "/v1/completions", completion(seqs/2, tokens+1), "--max-response-bytes"},
		{"chat at the limits", "/v1/chat/completions", chat(seqs, tokens), ""},
		{"chat one token more", "/v1/chat/completions", chat(seqs, tokens+1), "top_logprobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := ts.post(t, tc.path, tc.body)
			switch {
			case tc.want == "" && code != http.StatusOK:
				t.Fatalf("got %d %s, want 200", code, msg)
			case tc.want != "" && (code != http.StatusBadRequest || !strings.Contains(string(msg), tc.want)):
				t.Fatalf("got %d %s, want 400 naming %s", code, msg, tc.want)
			}
		})
	}
}
