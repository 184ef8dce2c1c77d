package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

const modelName = "kt-test"

type testServer struct {
	url    string
	runner *fakemodel.Runner
	eng    *engine.Engine
	client *openai.Client
}

// scripted returns a Script that answers prompts containing a marker with
// a fixed text, then EOS.
func scripted(answers map[string]string) func([]int32) (int32, bool) {
	tok := fakemodel.Tokenizer{}
	asst := tok.Encode("<|im_start|>assistant\n")
	type entry struct{ marker, answer []int32 }
	var list []entry
	for m, a := range answers {
		list = append(list, entry{tok.Encode(m), tok.Encode(a)})
	}
	return func(tokens []int32) (int32, bool) {
		start := -1
		for i := len(tokens) - len(asst); i >= 0; i-- {
			if slices.Equal(tokens[i:i+len(asst)], asst) {
				start = i + len(asst)
				break
			}
		}
		if start < 0 {
			return 0, false
		}
		prompt := tokens[:start]
		for _, e := range list {
			if containsSeq(prompt, e.marker) {
				// The output so far is the longest tail of what follows the
				// assistant header that is a prefix of the answer (the
				// template may put an empty think block first).
				gen := tokens[start:]
				for k := min(len(gen), len(e.answer)); k > 0; k-- {
					if slices.Equal(gen[len(gen)-k:], e.answer[:k]) {
						if k == len(e.answer) {
							return fakemodel.IMEnd, true
						}
						return e.answer[k], true
					}
				}
				return e.answer[0], true
			}
		}
		return 0, false
	}
}

func containsSeq(s, sub []int32) bool {
	for i := len(s) - len(sub); i >= 0; i-- {
		if slices.Equal(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

func newTestServer(t *testing.T, rc fakemodel.Config, ec engine.Config, mod func(*Options)) *testServer {
	t.Helper()
	if rc.EOS == 0 {
		rc.EOS = fakemodel.IMEnd
	}
	r := fakemodel.New(rc)
	if ec.MaxRunningRequests == 0 {
		ec.MaxRunningRequests = 16
	}
	if ec.ChunkedPrefillSize == 0 {
		ec.ChunkedPrefillSize = 64
	}
	ec.EnableMixedChunk = true
	e, err := engine.New(r, ec)
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Engine: e, ModelName: modelName, ModelPath: "/models/fake", Tokenizer: fakemodel.Tokenizer{},
		Template: fakemodel.ChatTemplate(), ReasoningParser: "qwen3", ToolCallParser: "qwen25", Version: "test"}
	if mod != nil {
		mod(&opt)
	}
	hs, client := startServer(t, e, opt, nil)
	return &testServer{url: hs.URL, runner: r, eng: e, client: client}
}

// startServer runs e's scheduler and serves it with opt over httptest until
// the test ends (after, if set, runs last); it returns the HTTP server and an
// OpenAI client for it.
func startServer(t *testing.T, e *engine.Engine, opt Options, after func()) (*httptest.Server, *openai.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.Run(ctx); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	stop := func() {
		cancel()
		<-done
		if after != nil {
			after()
		}
	}
	srv, err := New(opt)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = srv.HTTPServer()
	hs.Listener = srv.Listener(hs.Listener)
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		stop()
	})
	cfg := openai.DefaultConfig(opt.APIKey)
	cfg.BaseURL = hs.URL + "/v1"
	return hs, openai.NewClientWithConfig(cfg)
}

func (ts *testServer) post(t *testing.T, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	resp, err := http.Post(ts.url+path, "application/json", rd)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func (ts *testServer) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(ts.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func chatReq(content string, maxTokens int) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:       modelName,
		Messages:    []openai.ChatCompletionMessage{{Role: "user", Content: content}},
		MaxTokens:   maxTokens,
		Temperature: 0,
	}
}

// greedyBody is a raw chat request with temperature 0 (go-openai drops a
// zero temperature, which would mean 1).
func greedyBody(content string, maxTokens int) map[string]any {
	return map[string]any{"model": modelName, "messages": []map[string]any{{"role": "user", "content": content}},
		"max_tokens": maxTokens, "temperature": 0}
}

func TestChatResponseShape(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	code, body := ts.post(t, "/v1/chat/completions", greedyBody("hi, who are you?", 12))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "object", "created", "model", "choices", "usage", "metadata"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("response lacks %q: %s", k, body)
		}
	}
	ch := raw["choices"].([]any)[0].(map[string]any)
	for _, k := range []string{"index", "message", "logprobs", "finish_reason", "matched_stop"} {
		if _, ok := ch[k]; !ok {
			t.Errorf("choice lacks %q", k)
		}
	}
	msg := ch["message"].(map[string]any)
	for _, k := range []string{"role", "content", "reasoning_content", "tool_calls"} {
		if _, ok := msg[k]; !ok {
			t.Errorf("message lacks %q", k)
		}
	}
	u := raw["usage"].(map[string]any)
	for _, k := range []string{"prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details", "reasoning_tokens"} {
		if _, ok := u[k]; !ok {
			t.Errorf("usage lacks %q", k)
		}
	}
	if raw["object"] != "chat.completion" || raw["model"] != modelName || ch["finish_reason"] != "length" ||
		u["completion_tokens"].(float64) != 12 || u["total_tokens"].(float64) != u["prompt_tokens"].(float64)+12 {
		t.Errorf("values: %s", body)
	}
	prompt := "<|im_start|>user\nhi, who are you?<|im_end|>\n<|im_start|>assistant\n"
	if int(u["prompt_tokens"].(float64)) != len(fakemodel.Tokenizer{}.Encode(prompt)) {
		t.Errorf("prompt tokens %v", u["prompt_tokens"])
	}
}

func TestChatWithOpenAIClient(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	ctx := context.Background()
	req := chatReq("hello", 20)
	req.Temperature = 0.0000001 // go-openai omits 0
	resp, err := ts.client.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Usage.CompletionTokens != 20 || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("%+v", resp)
	}
	// Streaming gives the same text, and a usage chunk.
	req.Stream = true
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	st, err := ts.client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var text strings.Builder
	var gotUsage *openai.Usage
	var finish openai.FinishReason
	chunks := 0
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		if c.Usage != nil {
			gotUsage = c.Usage
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if text.String() != resp.Choices[0].Message.Content {
		t.Errorf("stream %q, non-stream %q", text.String(), resp.Choices[0].Message.Content)
	}
	if gotUsage == nil || gotUsage.CompletionTokens != 20 || finish != "length" || chunks < 3 {
		t.Errorf("usage %+v finish %q chunks %d", gotUsage, finish, chunks)
	}
	models, err := ts.client.ListModels(ctx)
	if err != nil || len(models.Models) != 1 || models.Models[0].ID != modelName {
		t.Errorf("models %+v %v", models, err)
	}
}

func TestConcurrentGreedyEqualsSolo(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{EOSAfter: 30}, engine.Config{MaxRunningRequests: 6, ChunkedPrefillSize: 16}, nil)
	const n = 24
	prompts := make([]string, n)
	solo := make([]string, n)
	for i := range n {
		prompts[i] = fmt.Sprintf("question %d: %s", i, strings.Repeat("why? ", i%5))
		code, body := ts.post(t, "/v1/chat/completions", greedyBody(prompts[i], 25))
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var r chatResponse
		_ = json.Unmarshal(body, &r)
		solo[i] = *r.Choices[0].Message.Content
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				code, body := ts.post(t, "/v1/chat/completions", greedyBody(prompts[i], 25))
				var r chatResponse
				_ = json.Unmarshal(body, &r)
				if code != 200 || *r.Choices[0].Message.Content != solo[i] {
					t.Errorf("request %d: %d %q, alone %q", i, code, body, solo[i])
				}
				return
			}
			b := greedyBody(prompts[i], 25)
			b["stream"] = true
			text, _, err := streamChat(ts.url, b)
			if err != nil || text != solo[i] {
				t.Errorf("stream %d: %q (%v), alone %q", i, text, err, solo[i])
			}
		})
	}
	wg.Wait()
	if ts.runner.Stats().MaxChunks < 2 {
		t.Errorf("requests never shared a step")
	}
}

// streamChat reads a chat stream over raw HTTP and returns the content and
// the decoded chunks.
func streamChat(url string, body map[string]any) (string, []map[string]any, error) {
	data, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var text strings.Builder
	var chunks []map[string]any
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return "", nil, fmt.Errorf("bad SSE line %q", line)
		}
		if payload == "[DONE]" {
			done = true
			break
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			return "", nil, err
		}
		chunks = append(chunks, c)
		for _, ch := range c["choices"].([]any) {
			d := ch.(map[string]any)["delta"].(map[string]any)
			if s, ok := d["content"].(string); ok {
				text.WriteString(s)
			}
		}
	}
	if !done {
		return "", nil, errors.New("stream ended without [DONE]")
	}
	return text.String(), chunks, nil
}

func TestClientDisconnectFreesSlot(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{StepDelay: 2 * time.Millisecond}, engine.Config{MaxRunningRequests: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	b := greedyBody("tell me a long story", 2000)
	b["stream"] = true
	data, _ := json.Marshal(b)
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.url+"/v1/chat/completions", bytes.NewReader(data))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for range 6 { // a few events
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if ts.eng.Stats().Running != 1 {
		t.Errorf("running %d", ts.eng.Stats().Running)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for ts.eng.Stats().Running != 0 || ts.runner.UsedPages() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after disconnect: running %d, pages %d", ts.eng.Stats().Running, ts.runner.UsedPages())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The single slot serves the next request.
	code, body := ts.post(t, "/v1/chat/completions", greedyBody("next", 3))
	if code != 200 {
		t.Errorf("after disconnect: %d %s", code, body)
	}
}

func TestBadRequests(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{ContextLen: 200}, engine.Config{}, nil)
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		want       string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model": "kt-test", "messages": [`, 400, "invalid JSON"},
		{"not an object", "/v1/chat/completions", `[1, 2]`, 400, "JSON object"},
		{"empty body", "/v1/chat/completions", ``, 400, "empty"},
		{"messages wrong type", "/v1/chat/completions", `{"messages": "hi"}`, 400, `"messages"`},
		{"max_tokens wrong type", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "max_tokens": "ten"}`, 400, `"max_tokens"`},
		{"temperature wrong type", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "temperature": "hot"}`, 400, `"temperature"`},
		{"adapter without LoRA", "/v1/chat/completions", map[string]any{"model": modelName + ":lora0", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, 400, `LoRA adapter "lora0" was requested, but LoRA is not enabled`},
		{"negative max_tokens", "/v1/chat/completions", greedyBody("hi", -5), 400, "max_tokens must be at least 1"},
		{"huge max_tokens", "/v1/chat/completions", greedyBody("hi", 1<<30), 400, "exceeds"},
		{"huge max_tokens stream", "/v1/chat/completions", func() map[string]any { b := greedyBody("hi", 1<<30); b["stream"] = true; return b }(), 400, "exceeds"},
		{"prompt too long", "/v1/chat/completions", greedyBody(long, 5), 400, "the prompt has"},
		{"no messages", "/v1/chat/completions", `{"messages": []}`, 400, "at least one message"},
		{"bad role", "/v1/chat/completions", `{"messages": [{"role":"wizard","content":"hi"}]}`, 400, "wizard"},
		{"image part", "/v1/chat/completions", `{"messages": [{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "only text parts"},
		{"top_logprobs alone", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "top_logprobs": 2}`, 400, "needs logprobs"},
		{"n zero", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "n": 0}`, 400, "n must be"},
		{"top_p", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "top_p": 1.5}`, 400, "top_p"},
		{"json_schema", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "response_format": {"type":"json_schema"}}`, 400, "response_format.json_schema"},
		{"json_schema no name", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "response_format": {"type":"json_schema","json_schema":{"schema":{"type":"object"}}}}`, 400, "response_format.json_schema.name"},
		{"json_schema unsupported keyword", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "response_format": {"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","patternProperties":{}}}}}`, 400, "patternProperties"},
		{"json_schema strict missing required", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "response_format": {"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}}}}`, 400, "Invalid schema for response_format 'x'"},
		{"tool_choice required", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "tool_choice": "required"}`, 400, "Tools cannot be empty if tool choice is set to required."},
		{"completions no prompt", "/v1/completions", `{"max_tokens": 3}`, 400, "prompt is required"},
		{"completions bad prompt", "/v1/completions", `{"prompt": {"a": 1}}`, 400, "prompt"},
		{"completions token out of vocab", "/v1/completions", `{"prompt": [1, 99999]}`, 400, "outside the vocabulary"},
		{"generate nothing", "/generate", `{}`, 400, "text or input_ids"},
		{"generate both", "/generate", `{"text": "a", "input_ids": [1]}`, 400, "not both"},
		{"generate input_ids as text", "/generate", `{"input_ids": "abc"}`, 400, "array of token ids"},
		{"generate input_ids of strings", "/generate", `{"input_ids": ["a", "b"]}`, 400, "array of token ids"},
		{"generate bad sampling", "/generate", `{"text": "a", "sampling_params": {"max_new_tokens": "x"}}`, 400, "max_new_tokens"},
		{"chat regex and response_format", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "regex": "a+", "response_format": {"type":"json_object"}}`, 400, "Only one of"},
		{"chat ebnf", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "ebnf": "root ::= x"}`, 400, `refers to undefined rule`},
		{"completions bad json_schema", "/v1/completions", `{"prompt": "a", "json_schema": "{\"type\":\"object\",\"minProperties\":1}"}`, 400, "minProperties"},
		{"generate ebnf", "/generate", `{"text": "a", "sampling_params": {"ebnf": "root ::= x"}}`, 400, `refers to undefined rule`},
		{"generate regex and schema", "/generate", `{"text": "a", "sampling_params": {"regex": "a+", "json_schema": "{}"}}`, 400, "Only one of"},
		{"generate bad regex", "/generate", `{"text": "a", "sampling_params": {"regex": "a(b"}}`, 400, "missing closing )"},
		{"generate regex boundary", "/generate", `{"text": "a", "sampling_params": {"regex": "a\\bb"}}`, 400, "word boundaries"},
		{"detokenize out of vocab", "/detokenize", `{"tokens": [5, 100000]}`, 400, "outside the vocabulary"},
		{"no route", "/v1/embeddings", `{}`, 404, "no route"},
	} {
		code, body := ts.post(t, tc.path, tc.body)
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s: not an OpenAI error: %s", tc.name, body)
		}
		if code != tc.status || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s: %d %q, want %d and %q", tc.name, code, e.Error.Message, tc.status, tc.want)
		}
	}
	// The OpenAI client sees a typed error.
	_, err := ts.client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "x:nope", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}})
	var ae *openai.APIError
	if !errors.As(err, &ae) || ae.HTTPStatusCode != 400 || ae.Param == nil || *ae.Param != "model" {
		t.Errorf("client error %v", err)
	}
	// And the server still serves.
	if code, body := ts.post(t, "/v1/chat/completions", greedyBody("hi", 3)); code != 200 {
		t.Errorf("after errors: %d %s", code, body)
	}
}

func TestKVBudgetExhaustedByLoad(t *testing.T) {
	// 40 pages of 8 tokens: 16 concurrent requests of ~30 prompt + 40
	// output tokens need far more, so requests queue and get preempted.
	ts := newTestServer(t, fakemodel.Config{PageSize: 8, Pages: 40, StepDelay: time.Millisecond}, engine.Config{MaxRunningRequests: 16, ChunkedPrefillSize: 32}, nil)
	const n = 16
	prompts := make([]string, n)
	solo := make([]string, n)
	for i := range n {
		prompts[i] = fmt.Sprintf("load %d", i)
		_, body := ts.post(t, "/v1/chat/completions", greedyBody(prompts[i], 60))
		var r chatResponse
		_ = json.Unmarshal(body, &r)
		solo[i] = *r.Choices[0].Message.Content
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code, body := ts.post(t, "/v1/chat/completions", greedyBody(prompts[i], 60))
			var r chatResponse
			_ = json.Unmarshal(body, &r)
			if code != 200 || *r.Choices[0].Message.Content != solo[i] {
				t.Errorf("request %d: %d %s", i, code, body)
			}
		})
	}
	wg.Wait()
	st := ts.eng.Stats()
	if st.Preemptions == 0 && ts.runner.Stats().PeakPages < 40 {
		t.Errorf("the budget was never exhausted (peak %d pages)", ts.runner.Stats().PeakPages)
	}
	if ts.runner.UsedPages() != 0 {
		t.Errorf("%d pages still held", ts.runner.UsedPages())
	}
}

func TestReasoningAndToolCalls(t *testing.T) {
	script := scripted(map[string]string{
		"THINK": "<think>\nThe user greets.\n</think>\n\nHello there!",
		"TOOL":  "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"CODER": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
		"PLAIN": "Just an answer.",
	})
	ts := newTestServer(t, fakemodel.Config{Script: script}, engine.Config{}, nil)
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}}}}}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			get := func(b map[string]any) (content, reasoning string, calls []toolCall, finish string, matched any) {
				t.Helper()
				if !stream {
					code, body := ts.post(t, "/v1/chat/completions", b)
					if code != 200 {
						t.Fatalf("%d %s", code, body)
					}
					var r chatResponse
					_ = json.Unmarshal(body, &r)
					m := r.Choices[0].Message
					if m.Content != nil {
						content = *m.Content
					}
					if m.ReasoningContent != nil {
						reasoning = *m.ReasoningContent
					}
					_ = json.Unmarshal(r.Choices[0].MatchedStop, &matched)
					return content, reasoning, m.ToolCalls, *r.Choices[0].FinishReason, matched
				}
				b["stream"] = true
				text, chunks, err := streamChat(ts.url, b)
				if err != nil {
					t.Fatal(err)
				}
				content = text
				for _, c := range chunks {
					for _, ch := range c["choices"].([]any) {
						chm := ch.(map[string]any)
						d := chm["delta"].(map[string]any)
						if s, ok := d["reasoning_content"].(string); ok {
							reasoning += s
						}
						if tc, ok := d["tool_calls"]; ok {
							data, _ := json.Marshal(tc)
							var cs []toolCall
							_ = json.Unmarshal(data, &cs)
							calls = append(calls, cs...)
						}
						if f, ok := chm["finish_reason"].(string); ok {
							finish = f
							matched = chm["matched_stop"]
						}
					}
				}
				return
			}
			c, r, _, f, m := get(greedyBody("THINK please", 100))
			if r != "The user greets.\n" || c != "Hello there!" || f != "stop" || m != float64(fakemodel.IMEnd) {
				t.Errorf("think: content %q reasoning %q finish %s matched %v", c, r, f, m)
			}
			b := greedyBody("TOOL weather?", 200)
			b["tools"] = tools
			c, _, calls, f, _ := get(b)
			if c != "Let me check." || len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city": "Paris"}` || f != "tool_calls" || calls[0].ID == "" {
				t.Errorf("tool call: content %q calls %+v finish %s", c, calls, f)
			}
			b = greedyBody("CODER weather?", 200)
			b["tools"] = tools
			_, _, calls, f, _ = get(b)
			if len(calls) != 1 || calls[0].Function.Arguments != `{"city": "Paris", "days": 3}` || f != "tool_calls" {
				t.Errorf("coder tool call: %+v finish %s", calls, f)
			}
			// Without tools in the request, the text stays content.
			c, _, calls, _, _ = get(greedyBody("TOOL weather?", 200))
			if len(calls) != 0 || !strings.Contains(c, "<tool_call>") {
				t.Errorf("no tools: content %q calls %+v", c, calls)
			}
			// enable_thinking=false: the template closes the think block.
			b = greedyBody("PLAIN", 100)
			b["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
			c, r, _, _, _ = get(b)
			if c != "Just an answer." || r != "" {
				t.Errorf("no thinking: content %q reasoning %q", c, r)
			}
		})
	}
}

func TestStopStrings(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{Script: scripted(map[string]string{"COUNT": "one, two, three, four"})}, engine.Config{}, nil)
	b := greedyBody("COUNT", 50)
	b["stop"] = []string{"three", "zzz"}
	code, body := ts.post(t, "/v1/chat/completions", b)
	var r chatResponse
	_ = json.Unmarshal(body, &r)
	if code != 200 || *r.Choices[0].Message.Content != "one, two, " || *r.Choices[0].FinishReason != "stop" || string(r.Choices[0].MatchedStop) != `"three"` {
		t.Errorf("%d %s", code, body)
	}
	b["stream"] = true
	text, chunks, err := streamChat(ts.url, b)
	if err != nil || text != "one, two, " {
		t.Errorf("stream %q %v", text, err)
	}
	last := chunks[len(chunks)-1]["choices"].([]any)[0].(map[string]any)
	if last["matched_stop"] != "three" || last["finish_reason"] != "stop" {
		t.Errorf("last chunk %v", last)
	}
	// no_stop_trim keeps the stop string.
	delete(b, "stream")
	b["no_stop_trim"] = true
	_, body = ts.post(t, "/v1/chat/completions", b)
	_ = json.Unmarshal(body, &r)
	if *r.Choices[0].Message.Content != "one, two, three" {
		t.Errorf("no_stop_trim: %s", body)
	}
}

func TestJSONObjectMode(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{Script: scripted(map[string]string{
		"GOOD": `{"answer": 42}`,
		"BAD":  `Sure: {"a": 1}}} and more`,
	})}, engine.Config{}, nil)
	for _, tc := range []struct{ prompt, want string }{{"GOOD", `{"answer": 42}`}, {"RANDOM", ""}} {
		b := greedyBody(tc.prompt, 60)
		b["response_format"] = map[string]any{"type": "json_object"}
		code, body := ts.post(t, "/v1/chat/completions", b)
		var r chatResponse
		_ = json.Unmarshal(body, &r)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		got := *r.Choices[0].Message.Content
		if tc.want != "" && got != tc.want {
			t.Errorf("%s: %q want %q", tc.prompt, got, tc.want)
		}
		if *r.Choices[0].FinishReason == "stop" && !json.Valid([]byte(got)) {
			t.Errorf("%s: finished with invalid JSON %q", tc.prompt, got)
		}
		if !strings.HasPrefix(strings.TrimSpace(got), "{") {
			t.Errorf("%s: %q does not start an object", tc.prompt, got)
		}
	}
}

func TestCompletionsAndGenerate(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	ctx := context.Background()
	resp, err := ts.client.CreateCompletion(ctx, openai.CompletionRequest{Model: modelName, Prompt: "Once upon", MaxTokens: 7, Temperature: 1e-7, LogProbs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Usage.CompletionTokens != 7 || len(resp.Choices[0].LogProbs.Tokens) != 7 || len(resp.Choices[0].LogProbs.TopLogprobs[0]) == 0 {
		t.Fatalf("%+v", resp)
	}
	// /generate with the same prompt as ids gives the same tokens.
	ids := fakemodel.Tokenizer{}.Encode("Once upon")
	code, body := ts.post(t, "/generate", map[string]any{"input_ids": ids, "sampling_params": map[string]any{"max_new_tokens": 7, "temperature": 0}, "return_logprob": true, "top_logprobs_num": 2, "logprob_start_len": 0})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var g struct {
		Text      string  `json:"text"`
		OutputIDs []int32 `json:"output_ids"`
		Meta      struct {
			FinishReason struct {
				Type   string `json:"type"`
				Length int    `json:"length"`
			} `json:"finish_reason"`
			PromptTokens     int     `json:"prompt_tokens"`
			CompletionTokens int     `json:"completion_tokens"`
			OutputLogprobs   [][]any `json:"output_token_logprobs"`
			InputLogprobs    [][]any `json:"input_token_logprobs"`
			OutputTop        [][]any `json:"output_top_logprobs"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal(body, &g); err != nil {
		t.Fatal(err)
	}
	if g.Text != resp.Choices[0].Text || len(g.OutputIDs) != 7 || g.Meta.FinishReason.Type != "length" || g.Meta.PromptTokens != len(ids) ||
		len(g.Meta.OutputLogprobs) != 7 || len(g.Meta.InputLogprobs) != len(ids) || g.Meta.InputLogprobs[0][0] != nil || len(g.Meta.OutputTop) != 7 {
		t.Errorf("generate: %s", body)
	}
	// Text prompt and a batch.
	code, body = ts.post(t, "/generate", map[string]any{"text": []string{"a", "b"}, "sampling_params": map[string]any{"max_new_tokens": 3}})
	var batch []map[string]any
	if code != 200 || json.Unmarshal(body, &batch) != nil || len(batch) != 2 {
		t.Errorf("batch: %d %s", code, body)
	}
	// Streaming /generate: cumulative text, then [DONE].
	data, _ := json.Marshal(map[string]any{"text": "Once upon", "stream": true, "sampling_params": map[string]any{"max_new_tokens": 7, "temperature": 0}})
	hr, err := http.Post(ts.url+"/generate", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	events := strings.Split(strings.TrimSpace(string(all)), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("stream end: %q", events[len(events)-1])
	}
	var lastEv map[string]any
	_ = json.Unmarshal([]byte(strings.TrimPrefix(events[len(events)-2], "data: ")), &lastEv)
	if lastEv["text"] != g.Text {
		t.Errorf("stream text %q, want %q", lastEv["text"], g.Text)
	}
	// Completions streaming with echo.
	b := map[string]any{"model": modelName, "prompt": "Once upon", "max_tokens": 7, "temperature": 0, "echo": true, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	data, _ = json.Marshal(b)
	hr, err = http.Post(ts.url+"/v1/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	all, _ = io.ReadAll(hr.Body)
	hr.Body.Close()
	var text strings.Builder
	sawUsage := false
	for _, ev := range strings.Split(strings.TrimSpace(string(all)), "\n\n") {
		p := strings.TrimPrefix(ev, "data: ")
		if p == "[DONE]" {
			continue
		}
		var c completionResponse
		_ = json.Unmarshal([]byte(p), &c)
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
		}
		if c.Usage != nil && c.Usage.CompletionTokens == 7 {
			sawUsage = true
		}
	}
	if text.String() != "Once upon"+g.Text || !sawUsage {
		t.Errorf("completions stream %q usage %v", text.String(), sawUsage)
	}
}

func TestSkipTokenizerInit(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) { o.Tokenizer = nil; o.Template = nil })
	code, body := ts.post(t, "/generate", map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": 4}})
	var g map[string]any
	_ = json.Unmarshal(body, &g)
	if code != 200 || len(g["output_ids"].([]any)) != 4 {
		t.Errorf("%d %s", code, body)
	}
	if _, has := g["text"]; has {
		t.Errorf("text returned without a tokenizer: %s", body)
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/tokenize"} {
		code, body := ts.post(t, path, `{"messages":[{"role":"user","content":"x"}],"prompt":"x"}`)
		if code != 400 || !strings.Contains(string(body), "skip-tokenizer-init") {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	code, _ = ts.post(t, "/generate", map[string]any{"text": "x"})
	if code != 400 {
		t.Errorf("text with no tokenizer: %d", code)
	}
}

// TestAPIKey: with --api-key, every route but SGLang's open ones (the
// health checks and /metrics) needs the key, as a Bearer token (the scheme
// in any case) or X-API-Key.
func TestAPIKey(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) { o.APIKey = "sekret" })
	for _, path := range []string{"/health", "/health_generate", "/metrics"} {
		if code, body := ts.get(t, path); code != 200 {
			t.Errorf("%s needs no key: %d %s", path, code, body)
		}
	}
	for _, path := range []string{"/v1/models", "/get_server_info", "/get_model_info", "/healthz/../v1/models"} {
		code, body := ts.get(t, path)
		if code != 401 || !strings.Contains(string(body), "API key") {
			t.Errorf("%s without key: %d %s", path, code, body)
		}
	}
	for _, c := range []struct {
		header, value string
		want          int
	}{
		{"Authorization", "Bearer wrong", 401},
		{"Authorization", "sekret", 401},
		{"Authorization", "Basic sekret", 401},
		{"Authorization", "Bearer sekret", 200},
		{"Authorization", "bearer sekret", 200},
		{"Authorization", "BEARER  sekret", 200},
		{"X-API-Key", "sekret", 200},
		{"X-API-Key", "wrong", 401},
	} {
		req, _ := http.NewRequest("GET", ts.url+"/v1/models", nil)
		req.Header.Set(c.header, c.value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %q: %d, want %d", c.header, c.value, resp.StatusCode, c.want)
		}
	}
	// The OpenAI client sends the key.
	if _, err := ts.client.ListModels(context.Background()); err != nil {
		t.Errorf("with key: %v", err)
	}
	// No route hands the key back.
	for _, path := range []string{"/get_server_info", "/server_info", "/get_model_info", "/v1/models"} {
		req, _ := http.NewRequest("GET", ts.url+path, nil)
		req.Header.Set("Authorization", "Bearer sekret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(b), "sekret") {
			t.Errorf("%s: %d, key in the body: %v", path, resp.StatusCode, strings.Contains(string(b), "sekret"))
		}
	}
}

func TestInfoRoutes(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) { o.ServerArgs = map[string]any{"port": 30000} })
	for _, tc := range []struct {
		method, path string
		body         any
		want         []string
	}{
		{"GET", "/health", nil, nil},
		{"GET", "/health_generate", nil, nil},
		{"GET", "/get_model_info", nil, []string{`"model_path":"/models/fake"`, `"is_generation":true`}},
		{"GET", "/get_server_info", nil, []string{`"max_total_num_tokens":16384`, `"port":30000`, `"num_running_reqs"`}},
		{"GET", "/v1/models/" + modelName, nil, []string{`"id":"kt-test"`, `"max_model_len":4096`}},
		{"POST", "/flush_cache", "", []string{"Cache flushed."}},
		{"POST", "/tokenize", `{"prompt": "hi<|im_end|>"}`, []string{`"tokens":[104,105,258]`, `"count":3`}},
		{"POST", "/detokenize", `{"tokens": [104, 105]}`, []string{`"text":"hi"`}},
	} {
		var code int
		var body []byte
		if tc.method == "GET" {
			code, body = ts.get(t, tc.path)
		} else {
			code, body = ts.post(t, tc.path, tc.body)
		}
		if code != 200 {
			t.Errorf("%s: %d %s", tc.path, code, body)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(body), w) {
				t.Errorf("%s: %s lacks %s", tc.path, body, w)
			}
		}
	}
	ts.post(t, "/v1/chat/completions", greedyBody("metrics please", 5))
	_, body := ts.get(t, "/metrics")
	for _, m := range []string{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:gen_throughput",
		"sglang:time_to_first_token_seconds_count", "sglang:inter_token_latency_seconds_count", "sglang:prompt_tokens_total",
		"sglang:generation_tokens_total", `model_name="kt-test"`} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

func TestNAndLogprobs(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	b := map[string]any{"model": modelName, "messages": []any{map[string]any{"role": "user", "content": "pick"}},
		"max_tokens": 6, "n": 3, "seed": 7, "temperature": 1.0, "logprobs": true, "top_logprobs": 2}
	code, body := ts.post(t, "/v1/chat/completions", b)
	var r chatResponse
	if err := json.Unmarshal(body, &r); err != nil || code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if len(r.Choices) != 3 || r.Usage.CompletionTokens != 18 {
		t.Fatalf("%s", body)
	}
	for i, c := range r.Choices {
		if c.Index != i || c.Logprobs == nil || len(c.Logprobs.Content) != 6 || len(c.Logprobs.Content[0].TopLogprobs) != 2 {
			t.Errorf("choice %d: %+v", i, c)
		}
	}
	// Same seed, same answers.
	_, body2 := ts.post(t, "/v1/chat/completions", b)
	var r2 chatResponse
	_ = json.Unmarshal(body2, &r2)
	for i := range r.Choices {
		if *r.Choices[i].Message.Content != *r2.Choices[i].Message.Content {
			t.Errorf("seeded choice %d differs", i)
		}
	}
	// Streaming n=2.
	b["stream"] = true
	b["n"] = 2
	_, chunks, err := streamChat(ts.url, b)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[float64]bool{}
	for _, c := range chunks {
		for _, ch := range c["choices"].([]any) {
			seen[ch.(map[string]any)["index"].(float64)] = true
		}
	}
	if !seen[0] || !seen[1] {
		t.Errorf("indexes seen %v", seen)
	}
}
