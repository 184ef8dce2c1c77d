package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

// chunkings splits s every k bytes for several k, to check that streaming
// parsers do not depend on where the text is cut.
func chunkings(s string) [][]string {
	var out [][]string
	for _, k := range []int{1, 2, 3, 5, 7, 1000} {
		var parts []string
		for i := 0; i < len(s); i += k {
			parts = append(parts, s[i:min(i+k, len(s))])
		}
		out = append(out, parts)
	}
	return out
}

func TestReasoningSplitter(t *testing.T) {
	for _, tc := range []struct {
		prompt, out        string
		reasoning, content string
	}{
		{"<|im_start|>assistant\n", "<think>\nweigh it\n</think>\n\nanswer", "weigh it\n", "answer"},
		{"<|im_start|>assistant\n<think>\n", "weigh it\n</think>\n\nanswer", "weigh it\n", "answer"},
		{"<|im_start|>assistant\n<think>\n\n</think>\n\n", "just the answer", "", "just the answer"},
		{"<|im_start|>assistant\n", "no tags at all", "", "no tags at all"},
		{"<|im_start|>assistant\n", "<thin is not a tag", "", "<thin is not a tag"},
		{"<|im_start|>assistant\n<think>\n", "cut off mid-thought </thi", "cut off mid-thought </thi", ""},
		{"<|im_start|>assistant\n", "a < b and </think> stays", "", "a < b and </think> stays"},
	} {
		for _, parts := range chunkings(tc.out) {
			rs, cs := splitReasoning(reasoningFormatFor("qwen3", tc.prompt, nil), parts)
			if rs != tc.reasoning || cs != tc.content {
				t.Errorf("%q in %d parts: reasoning %q content %q, want %q %q", tc.out, len(parts), rs, cs, tc.reasoning, tc.content)
				break
			}
		}
	}
}

func TestToolExtractor(t *testing.T) {
	tools := []toolDef{{Type: "function"}}
	tools[0].Function.Name = "f"
	tools[0].Function.Parameters = []byte(`{"properties": {"n": {"type": "integer"}, "s": {"type": "string"}, "o": {"type": "object"}}}`)
	for _, tc := range []struct {
		out     string
		content string
		calls   []string // name + " " + arguments
	}{
		{"plain text", "plain text", nil},
		{`pre <tool_call>{"name": "f", "arguments": {"n": 1}}</tool_call>`, "pre ", []string{`f {"n": 1}`}},
		{"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"x\\\":2}\"}\n</tool_call>", "\n", []string{"f {}", `g {"x":2}`}},
		{"<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=s>\n42\n</parameter>\n<parameter=o>\n{\"a\": [1]}\n</parameter>\n</function>\n</tool_call>", "", []string{`f {"n": 42, "s": "42", "o": {"a": [1]}}`}},
		{"<function=f>\n<parameter=s>\nline1\nline2\n</parameter>\n</function>", "", []string{`f {"s": "line1\nline2"}`}},
		{`<tool_call>{"name": "f", "arguments": {"n": 1}}`, "", []string{`f {"n": 1}`}}, // unclosed at the end
		{`<tool_call>not json</tool_call>after`, "after", nil},
	} {
		for _, parts := range chunkings(tc.out) {
			x := &toolExtractor{tools: tools, prefix: "t"}
			var cs strings.Builder
			for _, p := range parts {
				cs.WriteString(x.feed(p, false))
			}
			cs.WriteString(x.feed("", true))
			var calls []string
			for _, c := range x.calls {
				calls = append(calls, c.Function.Name+" "+c.Function.Arguments)
			}
			if cs.String() != tc.content || strings.Join(calls, "|") != strings.Join(tc.calls, "|") {
				t.Errorf("%q in %d parts: content %q calls %q, want %q %q", tc.out, len(parts), cs.String(), calls, tc.content, tc.calls)
				break
			}
		}
	}
}

func TestDecoderHoldsPartialCharacters(t *testing.T) {
	d := decoder{tok: fakemodel.Tokenizer{}, skip: true}
	var out strings.Builder
	for _, b := range []byte("é日本🤖") {
		piece := d.add(int32(b))
		if strings.ContainsRune(piece, '\uFFFD') {
			t.Fatalf("emitted a broken character %q", piece)
		}
		out.WriteString(piece)
	}
	out.WriteString(d.add(fakemodel.IMEnd)) // special: skipped
	out.WriteString(d.flush())
	if out.String() != "é日本🤖" {
		t.Errorf("got %q", out.String())
	}
}

// FuzzChatRequest sends arbitrary bodies to the chat route: the answer is
// always a 200 or a 4xx with an OpenAI error, never a panic or a 500.
func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"kt-test","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":["x"],"n":2,"max_tokens":2}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}],"max_tokens":1}`,
		`{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"},"max_tokens":4,"logprobs":true,"top_logprobs":3}`,
		`{"messages":[], "temperature": -1}`, `[]`, `null`, `{"messages":[{"role":"user"}]}`,
	} {
		f.Add(s)
	}
	r := fakemodel.New(fakemodel.Config{EOS: fakemodel.IMEnd, ContextLen: 256})
	e, err := engine.New(r, engine.Config{MaxRunningRequests: 4})
	if err != nil {
		f.Fatal(err)
	}
	ctx := f.Context() // not inside the goroutine: it may run once the fuzz target has started
	go func() { _ = e.Run(ctx) }()
	srv, err := New(Options{Engine: e, ModelName: modelName, Tokenizer: fakemodel.Tokenizer{}, Template: fakemodel.ChatTemplate(), ReasoningParser: "qwen3", ToolCallParser: "qwen25"})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		if len(body) > 4096 {
			return
		}
		// Bound the work a fuzzed request can ask for.
		if strings.Contains(body, "max_tokens") && !strings.Contains(body, `"max_tokens":`) {
			return
		}
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 || w.Code != http.StatusOK && w.Code < 400 {
			t.Fatalf("%q: status %d %s", body, w.Code, w.Body.String())
		}
	})
}

// splitReasoning feeds parts, in order, to a reasoning splitter of format f
// and returns the reasoning and the content it split them into.
func splitReasoning(f *reasoningFormat, parts []string) (reasoning, content string) {
	r := newReasoningSplitter(f)
	var rs, cs strings.Builder
	for _, p := range parts {
		a, b := r.feed(p, false)
		rs.WriteString(a)
		cs.WriteString(b)
	}
	a, b := r.feed("", true)
	rs.WriteString(a)
	cs.WriteString(b)
	return rs.String(), cs.String()
}
