package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ktserve/kt/internal/fixtures"
)

// startServe runs kt serve in-process on a free port and returns its URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	url, _ := startServeLogs(t, args...)
	return url
}

// postJSON posts the JSON body to url and returns the status and the
// response body.
func postJSON(url string, body []byte) (int, []byte, error) {
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// startServeLogs is startServe that also returns a function reading the
// server's log so far.
func startServeLogs(t *testing.T, args ...string) (string, func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	var mu sync.Mutex
	go func() {
		done <- runServe(ctx, append([]string{"--port", "0"}, args...), io.Discard, &lockedWriter{w: &logs, mu: &mu}, func(a string) { addr <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	read := func() string {
		mu.Lock()
		defer mu.Unlock()
		return logs.String()
	}
	select {
	case a := <-addr:
		return "http://" + a, read
	case err := <-done:
		t.Fatalf("serve exited: %v\n%s", err, read())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	return "", read
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestServeTinyModelMatchesTransformers serves a tiny Qwen3-MoE checkpoint
// and checks that concurrent greedy /generate requests return the token ids
// Hugging Face transformers produced for the same prompts.
func TestServeTinyModelMatchesTransformers(t *testing.T) {
	dir := fixtures.Dir("qwen3moe-a")
	cases, err := fixtures.Read("qwen3moe-a")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no tiny model: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	url := startServe(t, "--model-path", dir, "--skip-tokenizer-init", "--max-running-requests", "4",
		"--max-total-tokens", "2048", "--chunked-prefill-size", "8", "--enable-mixed-chunk", "--log-level", "warning")
	var wg sync.WaitGroup
	for _, c := range cases {
		if len(c.GreedyIDs) == 0 {
			continue
		}
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"input_ids": c.PromptIDs,
				"sampling_params": map[string]any{"max_new_tokens": len(c.GreedyIDs), "temperature": 0, "ignore_eos": true}})
			code, raw, err := postJSON(url+"/generate", body)
			if err != nil {
				t.Error(err)
				return
			}
			var out struct {
				OutputIDs []int32 `json:"output_ids"`
			}
			if err := json.Unmarshal(raw, &out); err != nil || code != 200 {
				t.Errorf("%s: %d %s", c.Name, code, raw)
				return
			}
			if !slices.Equal(out.OutputIDs, c.GreedyIDs) {
				t.Errorf("%s: served %v\ntransformers %v", c.Name, out.OutputIDs, c.GreedyIDs)
			}
		})
	}
	wg.Wait()
	// Text routes explain why they cannot work without a tokenizer.
	code, raw, err := postJSON(url+"/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if code != 400 || !strings.Contains(string(raw), "skip-tokenizer-init") {
		t.Errorf("chat without tokenizer: %d %s", code, raw)
	}
}

func TestServeFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--model-path: required"},
		{[]string{"--model-path", "/nonexistent"}, "config.json"},
		// accepted with tensor parallelism: the model directory is read
		{[]string{"--model-path", "/nonexistent", "--device", "cpu", "--tensor-parallel-size", "4", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-max-deferred-experts-per-token", "1"}, "config.json"},
		{[]string{"--model-path", "x", "--enable-lora", "--lora-paths", "a=/b", "--lora-paths", "c=/d"}, "Only one merged KT composite LoRA adapter is supported"},
		{[]string{"--model-path", "x", "--kt-weight-path", "/w", "--kt-method", "GPTQ_INT4"}, "--kt-method: GPTQ_INT4 is not implemented yet in kt"},
		{[]string{"--model-path", "x", "--device", "cpu", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "512"}, "--kt-gpu-prefill-token-threshold: layerwise GPU prefill needs a GPU"},
		{[]string{"--model-path", "x", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-enable-dynamic-expert-update"}, "--kt-gpu-prefill-token-threshold"},
	} {
		err := runServe(context.Background(), tc.args, io.Discard, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	var out bytes.Buffer
	if err := runServe(context.Background(), []string{"--help"}, &out, io.Discard, nil); err != nil || !strings.Contains(out.String(), "--kt-numa-nodes") {
		t.Errorf("--help: %v %q", err, out.String())
	}
}

// TestServeTinyModelChat serves the tiny checkpoint with the cut-down Qwen3
// tokenizer (the README's main command) and chats with it.
func TestServeTinyModelChat(t *testing.T) {
	root := filepath.Join("..", "..", "testdata")
	model := filepath.Join(root, "models", "qwen3moe-a")
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil {
		t.Skipf("no tiny model: %v", err)
	}
	url := startServe(t, "--model-path", model, "--tokenizer-path", filepath.Join(root, "tokenizers", "qwen3-tiny1000"),
		"--served-model-name", "tiny", "--api-key", "k", "--log-level", "warning")
	var out strings.Builder
	o := &chatOptions{url: url, apiKey: "k", temperature: 0, maxTokens: 8}
	if err := runChat(context.Background(), o, strings.NewReader("hi, who are you?\n/quit\n"), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Chatting with tiny") || !strings.Contains(out.String(), "(cut at --max-tokens 8)") {
		t.Errorf("chat output:\n%s", out.String())
	}
	// The request samples at the default temperature, so it could draw an
	// EOS token before max_tokens; ignore_eos makes the count exact.
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"ignore_eos":true}`))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"completion_tokens":4`) {
		t.Errorf("chat: %d %s", resp.StatusCode, raw)
	}
	// /get_server_info reports the flags under SGLang's names, the
	// effective sizes, and never the API key.
	req, _ = http.NewRequest("GET", url+"/get_server_info", nil)
	req.Header.Set("Authorization", "Bearer k")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`"served_model_name":"tiny"`, `"tp_size":1`, `"max_running_requests":32`, `"page_size":16`, `"log_level":"warning"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/get_server_info lacks %s: %s", want, raw)
		}
	}
	if strings.Contains(string(raw), `"k"`) || strings.Contains(string(raw), "api_key") {
		t.Errorf("/get_server_info shows the API key: %s", raw)
	}
}

// TestServeChatTemplateSources: the chat template comes from the tokenizer
// directory or --chat-template; without one the chat API answers 400 (as
// SGLang) while the other routes serve; a template that cannot be loaded
// stops startup with the file named.
func TestServeChatTemplateSources(t *testing.T) {
	root := filepath.Join("..", "..", "testdata")
	model := filepath.Join(root, "models", "qwen3moe-a")
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil {
		t.Skipf("no tiny model: %v", err)
	}
	tokDir := t.TempDir()
	src, err := filepath.Abs(filepath.Join(root, "tokenizers", "qwen3-tiny1000", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(src, filepath.Join(tokDir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tokDir, "tokenizer_config.json"), []byte(`{"eos_token": "<|im_end|>"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	custom := filepath.Join(t.TempDir(), "custom.jinja")
	if err := os.WriteFile(custom, []byte(`{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token }}{% endfor %}assistant:`), 0o600); err != nil {
		t.Fatal(err)
	}
	post := func(url, path, body string) (int, string) {
		t.Helper()
		code, raw, err := postJSON(url+path, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return code, string(raw)
	}
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`

	url := startServe(t, "--model-path", model, "--tokenizer-path", tokDir, "--log-level", "warning")
	if code, body := post(url, "/v1/chat/completions", chat); code != 400 || !strings.Contains(body, "--chat-template") {
		t.Errorf("chat without a template: %d %s", code, body)
	}
	if code, body := post(url, "/v1/completions", `{"prompt":"hi","max_tokens":2}`); code != 200 {
		t.Errorf("completions without a template: %d %s", code, body)
	}

	url = startServe(t, "--model-path", model, "--tokenizer-path", tokDir, "--chat-template", custom, "--log-level", "warning")
	code, body := post(url, "/v1/chat/completions", chat)
	// The prompt is exactly the custom template's rendering.
	var r struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal([]byte(body), &r)
	_, ids := post(url, "/tokenize", `{"prompt":"user: hi<|im_end|>assistant:"}`)
	var tk struct {
		Count int `json:"count"`
	}
	_ = json.Unmarshal([]byte(ids), &tk)
	if code != 200 || tk.Count == 0 || r.Usage.PromptTokens != tk.Count {
		t.Errorf("chat with --chat-template: %d %s (the rendered prompt has %d tokens: %s)", code, body, tk.Count, ids)
	}

	bad := filepath.Join(t.TempDir(), "bad.jinja")
	if err := os.WriteFile(bad, []byte(`{% for %}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ flag, want string }{
		{bad, "bad.jinja"},
		{"chatml", "built-in template names are not supported"},
		{filepath.Join(tokDir, "missing.jinja"), "missing.jinja"},
	} {
		err := runServe(context.Background(), []string{"--port", "0", "--model-path", model, "--tokenizer-path", tokDir, "--chat-template", c.flag}, io.Discard, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--chat-template %s: %v, want %q", c.flag, err, c.want)
		}
	}
}
