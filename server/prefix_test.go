package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ktserve/kt/arch"
	_ "github.com/ktserve/kt/arch/all"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
	"github.com/ktserve/kt/internal/fixtures"
)

// newFixtureServer serves the qwen3moe-a test checkpoint (a real model on
// the CPU backend, with the byte-level test tokenizer and ChatML template)
// with the prefix cache on, reporting cached tokens when report is set.
func newFixtureServer(t *testing.T, report bool) (*openai.Client, *httptest.Server, *engine.Engine) {
	return newFixtureServerOf(t, "qwen3moe-a", report)
}

// newFixtureServerOf is newFixtureServer on another fixture (with up to 4
// kept recurrent-state snapshots where the model has linear attention).
func newFixtureServerOf(t *testing.T, fixture string, report bool) (*openai.Client, *httptest.Server, *engine.Engine) {
	t.Helper()
	be := cpu.New(cpu.Options{Threads: 2})
	r, err := arch.Load(fixtures.Dir(fixture), arch.Options{MaxSeqs: 4, MaxTotalTokens: 4096, MaxBatchTokens: 512, PageSize: 16, Backend: be, PrefixSnapshots: 4})
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	e, err := engine.New(r, engine.Config{MaxRunningRequests: 4, ChunkedPrefillSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	hs, client := startServer(t, e, Options{Engine: e, ModelName: modelName, ModelPath: "/models/fixture", Tokenizer: fakemodel.Tokenizer{},
		Template: fakemodel.ChatTemplate(), ReasoningParser: "none", ToolCallParser: "none", Version: "test", CacheReport: report},
		func() {
			r.Close()
			be.Close()
		})
	return client, hs, e
}

// askWithSystem sends a 4-token chat completion of a system and a user
// message and returns its usage.
func askWithSystem(t *testing.T, client *openai.Client, system, user string) openai.Usage {
	t.Helper()
	resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Model: modelName, MaxTokens: 4,
		Messages: []openai.ChatCompletionMessage{{Role: "system", Content: system}, {Role: "user", Content: user}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Usage
}

func TestCachedTokensInUsage(t *testing.T) {
	client, hs, _ := newFixtureServer(t, true)
	ts := &testServer{url: hs.URL}
	system := strings.Repeat("You are a careful assistant who answers briefly. ", 4) // ~200 byte tokens
	ask := func(user string) openai.Usage { t.Helper(); return askWithSystem(t, client, system, user) }
	u1 := ask("What is two plus two?")
	if u1.PromptTokensDetails == nil || u1.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first request: prompt_tokens_details %+v, want cached_tokens 0", u1.PromptTokensDetails)
	}
	u2 := ask("Name a colour.")
	// the shared part: the system turn and the user header, in whole pages of 16
	shared := len(fakemodel.Tokenizer{}.Encode("<|im_start|>system\n"+system+"<|im_end|>\n<|im_start|>user\n")) / 16 * 16
	if u2.PromptTokensDetails == nil || u2.PromptTokensDetails.CachedTokens != shared {
		t.Fatalf("second request: prompt_tokens_details %+v, want cached_tokens %d of %d prompt tokens", u2.PromptTokensDetails, shared, u2.PromptTokens)
	}

	// streaming usage reports it too
	stream, err := client.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model: modelName, MaxTokens: 3, Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages: []openai.ChatCompletionMessage{{Role: "system", Content: system}, {Role: "user", Content: "Name a colour."}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var last *openai.Usage
	for {
		c, err := stream.Recv()
		if err != nil {
			break
		}
		if c.Usage != nil {
			last = c.Usage
		}
	}
	stream.Close()
	if last == nil || last.PromptTokensDetails == nil || last.PromptTokensDetails.CachedTokens < shared {
		t.Fatalf("streamed usage %+v: want at least %d cached tokens", last, shared)
	}

	// /generate's meta_info, then /flush_cache empties the cache
	code, body := ts.post(t, "/flush_cache", "")
	if code != 200 || !strings.Contains(string(body), "Cache flushed") {
		t.Fatalf("/flush_cache: %d %s", code, body)
	}
	if u := ask("Name a colour."); u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("after /flush_cache: %+v, want 0 cached tokens", u.PromptTokensDetails)
	}
	code, body = ts.post(t, "/generate", `{"input_ids": [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22], "sampling_params": {"max_new_tokens": 2}}`)
	code2, body2 := ts.post(t, "/generate", `{"input_ids": [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22], "sampling_params": {"max_new_tokens": 2}}`)
	if code != 200 || code2 != 200 || !strings.Contains(string(body), `"cached_tokens":0`) || !strings.Contains(string(body2), `"cached_tokens":16`) {
		t.Fatalf("/generate twice: %d %s\n%d %s", code, body, code2, body2)
	}
	code, body = ts.get(t, "/metrics")
	if code != 200 || !strings.Contains(string(body), `sglang:cached_tokens_total{cache_source="device",model_name="kt-test"}`) ||
		strings.Contains(string(body), "sglang:cache_hit_rate{model_name=\"kt-test\"} 0\n") {
		t.Fatalf("/metrics lacks the cache's series or reports no hits:\n%s", body)
	}
	code, body = ts.get(t, "/get_server_info")
	if code != 200 || !strings.Contains(string(body), `"radix_cache":true`) {
		t.Fatalf("/get_server_info: %d %s", code, body)
	}
}

// TestCachedTokensSharedSystemPromptHybrid: on a Qwen3.5 hybrid (Gated
// DeltaNet layers, whose state is kept only at snapshots), chat requests
// that share a system prompt: the first caches nothing reusable for the
// others, the second stops its prefill where it leaves the first's pages
// (a branch point) and keeps the state there, and the third is served the
// system turn's whole pages from the cache (go-openai over HTTP).
func TestCachedTokensSharedSystemPromptHybrid(t *testing.T) {
	client, hs, e := newFixtureServerOf(t, "qwen35moe-b", true)
	system := strings.Repeat("You are a careful assistant who answers briefly. ", 4)
	ask := func(user string) int {
		t.Helper()
		u := askWithSystem(t, client, system, user)
		if u.PromptTokensDetails == nil {
			t.Fatalf("no prompt_tokens_details in %+v", u)
		}
		return u.PromptTokensDetails.CachedTokens
	}
	shared := len(fakemodel.Tokenizer{}.Encode("<|im_start|>system\n"+system+"<|im_end|>\n<|im_start|>user\n")) / 16 * 16
	for i, want := range []int{0, 0, shared, shared} {
		if got := ask([]string{"What is two plus two?", "Name a colour.", "Say hello.", "Count to three."}[i]); got != want {
			t.Fatalf("request %d: %d cached tokens, want %d", i+1, got, want)
		}
	}
	if st := e.Stats(); st.PrefixBranches != 1 {
		t.Errorf("%d prefills stopped at a branch point, want 1", st.PrefixBranches)
	}
	ts := &testServer{url: hs.URL}
	if code, body := ts.get(t, "/metrics"); code != 200 || !strings.Contains(string(body), "kt:prefix_branches{model_name=\"kt-test\"} 1\n") {
		t.Errorf("/metrics: %d, no kt:prefix_branches 1", code)
	}
	if code, body := ts.get(t, "/get_server_info"); code != 200 || !strings.Contains(string(body), `"prefix_branches":1`) {
		t.Errorf("/get_server_info: %d, no prefix_branches 1", code)
	}
}

func TestCachedTokensNotReportedByDefault(t *testing.T) {
	client, _, e := newFixtureServer(t, false)
	for range 2 {
		resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model: modelName, MaxTokens: 2,
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: strings.Repeat("hello there ", 5)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage.PromptTokensDetails != nil {
			t.Fatalf("prompt_tokens_details %+v without --enable-cache-report, want null as SGLang", resp.Usage.PromptTokensDetails)
		}
	}
	if st := e.Stats(); st.PrefixHitTokens == 0 {
		t.Errorf("the repeated prompt had no cache hit: %+v", st)
	}
}
