package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/chattemplate"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
	"github.com/ktserve/kt/server"
)

// chatServer serves a fake model that answers "<think>...</think>" then a
// fixed reply, counting the turns it has seen.
func chatServer(t *testing.T) string {
	t.Helper()
	tok := fakemodel.Tokenizer{}
	asst := tok.Encode("<|im_start|>assistant\n")
	answer := tok.Encode("<think>\nPondering.\n</think>\n\nHello from kt.")
	script := func(tokens []int32) (int32, bool) {
		for i := len(tokens) - len(asst); i >= 0; i-- {
			if slices.Equal(tokens[i:i+len(asst)], asst) {
				gen := tokens[i+len(asst):]
				if len(gen) >= len(answer) {
					return fakemodel.IMEnd, true
				}
				return answer[len(gen)], true
			}
		}
		return 0, false
	}
	r := fakemodel.New(fakemodel.Config{EOS: fakemodel.IMEnd, Script: script})
	e, err := engine.New(r, engine.Config{MaxRunningRequests: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = e.Run(ctx) }()
	// Qwen3's own chat template (the tiny tokenizer directory keeps it).
	tmpl, err := chattemplate.Load("../../testdata/tokenizers/qwen3-tiny1000")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Engine: e, ModelName: "tiny", Tokenizer: tok, Template: tmpl, ReasoningParser: "qwen3"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); cancel() })
	return hs.URL
}

func TestChatREPL(t *testing.T) {
	url := chatServer(t)
	hist := filepath.Join(t.TempDir(), "history.json")
	for _, stream := range []bool{true, false} {
		in := strings.NewReader("hello\n/history\n/retry\n/bogus\nsecond question\n/clear\n/history\n/save\n/quit\n")
		var out strings.Builder
		o := &chatOptions{url: url, system: "Be kind.", temperature: 0, maxTokens: 100, noStream: !stream, historyFile: hist}
		if err := runChat(context.Background(), o, in, &out); err != nil {
			t.Fatal(err)
		}
		got := out.String()
		for _, want := range []string{"Chatting with tiny", "[thinking] Pondering.\n", "[answer]\nHello from kt.", "[system] Be kind.",
			"[user] hello", "[assistant thinking] Pondering.\n", "[assistant] Hello from kt.", "unknown command /bogus", "(conversation cleared)", "(saved 1 messages"} {
			if !strings.Contains(got, want) {
				t.Errorf("stream=%v: output lacks %q:\n%s", stream, want, got)
			}
		}
		if n := strings.Count(got, "Hello from kt."); n != 4 { // hello, /history, /retry, second question
			t.Errorf("stream=%v: %d answers:\n%s", stream, n, got)
		}
		data, err := os.ReadFile(hist)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []chatMsg
		if err := json.Unmarshal(data, &msgs); err != nil || len(msgs) != 1 || msgs[0].Role != "system" {
			t.Errorf("saved history %s", data)
		}
	}
	// No server: a clear error.
	err := runChat(context.Background(), &chatOptions{url: "http://127.0.0.1:1"}, strings.NewReader(""), &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "is kt serve running") {
		t.Errorf("no server: %v", err)
	}
}
