// Command loadserve puts a running kt serve under many concurrent clients
// for a while and reports requests served, errors, tokens and the server's
// memory before and after (from its /metrics).
//
//	go run ./tools/loadserve -url http://127.0.0.1:30000 -clients 64 -duration 3m
//
// Each client loops over a mix of requests that work with or without a
// tokenizer (prompts are token ids): /generate streaming and not,
// /v1/completions streaming and not, and streams it abandons after the first
// event (a client disconnect). With -chat it also sends chat requests.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

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

func main() {
	url := flag.String("url", "http://127.0.0.1:30000", "server base URL")
	clients := flag.Int("clients", 32, "concurrent clients")
	duration := flag.Duration("duration", time.Minute, "how long to run")
	maxTokens := flag.Int("max-tokens", 64, "most tokens per request")
	vocab := flag.Int("vocab", 1000, "prompt token ids are drawn below this")
	chat := flag.Bool("chat", false, "also send chat requests (needs a tokenizer)")
	apiKey := flag.String("api-key", "", "API key")
	flag.Parse()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients}}
	before, err := memory(client, *url, *apiKey)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadserve:", err)
		os.Exit(1)
	}
	var c counters
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range *clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for ctx.Err() == nil {
				one(ctx, client, *url, *apiKey, rng, *maxTokens, *vocab, *chat, &c)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(2 * time.Second) // let abandoned streams drain
	after, err := memory(client, *url, *apiKey)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadserve:", err)
		os.Exit(1)
	}
	fmt.Printf("clients %d, %s: %d requests served, %d errors, %d abandoned mid-stream (disconnects), %d tokens (%.0f tok/s)\n",
		*clients, elapsed.Round(time.Second), c.ok.Load(), c.errs.Load(), c.abandoned.Load(), c.tokens.Load(), float64(c.tokens.Load())/elapsed.Seconds())
	for _, k := range []string{"process_resident_memory_bytes", "go_memstats_heap_inuse_bytes", "go_goroutines", "sglang:num_running_reqs", "sglang:num_used_tokens"} {
		fmt.Printf("  %-32s before %14.0f  after %14.0f\n", k, before[k], after[k])
	}
	for _, e := range c.firstErr {
		fmt.Println("  error:", e)
	}
	if c.errs.Load() > 0 {
		os.Exit(1)
	}
}

// one sends a random request and records the outcome.
func one(ctx context.Context, client *http.Client, url, key string, rng *rand.Rand, maxTokens, vocab int, chat bool, c *counters) {
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
	data, _ := json.Marshal(body)
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(reqCtx, "POST", url+path, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.fail("%s: %v", path, err)
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		c.fail("%s: %d %s", path, resp.StatusCode, b)
		return
	}
	if abandon {
		rd := bufio.NewReader(resp.Body)
		if _, err := rd.ReadString('\n'); err != nil && ctx.Err() == nil {
			c.fail("%s: %v", path, err)
			return
		}
		cancel()
		c.abandoned.Add(1)
		return
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() == nil {
			c.fail("%s: %v", path, err)
		}
		return
	}
	if strings.Contains(string(b), `"error"`) {
		c.fail("%s: error in the body: %.200s", path, b)
		return
	}
	c.ok.Add(1)
	c.tokens.Add(int64(n))
}

// memory reads the server's process and Go memory series from /metrics.
func memory(client *http.Client, url, key string) (map[string]float64, error) {
	req, _ := http.NewRequest("GET", url+"/metrics", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s/metrics: %w", url, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}
