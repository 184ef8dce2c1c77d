// Package servebench drives a running kt serve (or SGLang) server over
// HTTP. Bench is a serving benchmark in the manner of sglang.bench_serving:
// random prompts of given input and output lengths sent at a request rate
// or a maximum concurrency, reporting TTFT, TPOT, ITL, end-to-end latency
// and throughput. Load is a soak test: many clients sending a mix of
// requests (streaming, abandoned streams) for a while, reporting errors and
// the server's memory before and after.
package servebench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// client sends requests to one server.
type client struct {
	base   string
	apiKey string
	http   *http.Client
}

func newClient(base, apiKey string, hc *http.Client, conns int) *client {
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: max(conns, 2)}}
	}
	return &client{base: strings.TrimSuffix(base, "/"), apiKey: apiKey, http: hc}
}

// do sends a request with a JSON body (nil: GET) and returns the response;
// a status other than 200 is an error with the body's start.
func (c *client) do(ctx context.Context, path string, body any) (*http.Response, error) {
	method, rd := "GET", io.Reader(nil)
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		method, rd = "POST", bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp, nil
}

// getJSON fetches path into v.
func (c *client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// errDone ends an SSE read early without error.
var errDone = errors.New("done")

// readSSE calls fn with the payload of each "data:" event until [DONE]
// or the end of the body. An event carrying {"error": ...} is an error.
func readSSE(r io.Reader, fn func(data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		line = bytes.TrimSpace(line)
		if string(line) == "[DONE]" {
			return nil
		}
		if bytes.HasPrefix(line, []byte(`{"error"`)) {
			return fmt.Errorf("error event: %.300s", line)
		}
		if err := fn(line); err != nil {
			if errors.Is(err, errDone) {
				return nil
			}
			return err
		}
	}
	return sc.Err()
}

// metrics reads the server's Prometheus /metrics: series name (labels
// dropped) to value.
func (c *client) metrics(ctx context.Context) (map[string]float64, error) {
	resp, err := c.do(ctx, "/metrics", nil)
	if err != nil {
		return nil, err
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
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	return out, nil
}

// prefillTokens reads the prompt tokens the server has computed so far
// (kt's /get_server_info internal_states[0].prompt_tokens_total); false
// when the server does not report it.
func (c *client) prefillTokens(ctx context.Context) (int, bool) {
	var info struct {
		InternalStates []struct {
			PromptTokensTotal *int `json:"prompt_tokens_total"`
		} `json:"internal_states"`
	}
	if err := c.getJSON(ctx, "/get_server_info", &info); err != nil || len(info.InternalStates) == 0 || info.InternalStates[0].PromptTokensTotal == nil {
		return 0, false
	}
	return *info.InternalStates[0].PromptTokensTotal, true
}
