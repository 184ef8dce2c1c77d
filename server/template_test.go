package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ktserve/kt/chattemplate"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
	"github.com/ktserve/kt/tokenizer"
)

// The chat template goldens of package chattemplate: renderings by Python
// Jinja2 set up as transformers' apply_chat_template, of conversations
// whose tool schemas and arguments have unsorted keys.
const goldenDir = "../chattemplate/testdata"

type goldenConv struct {
	Name     string          `json:"name"`
	Messages json.RawMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
}

type goldenRender struct {
	Template            string          `json:"template"`
	Conversation        string          `json:"conversation"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	Output              *string         `json:"output"`
}

func readGolden(t *testing.T) (map[string]goldenConv, []goldenRender) {
	t.Helper()
	var convs struct {
		Conversations []goldenConv `json:"conversations"`
	}
	var golden struct {
		Cases []goldenRender `json:"cases"`
	}
	for name, v := range map[string]any{"conversations.json": &convs, "golden.json": &golden} {
		data, err := os.ReadFile(filepath.Join(goldenDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	byName := map[string]goldenConv{}
	for _, c := range convs.Conversations {
		byName[c.Name] = c
	}
	return byName, golden.Cases
}

// goldenTemplate loads a template of the golden set the way kt serve does:
// chattemplate.Load for a tokenizer directory, chattemplate.LoadFile (as
// --chat-template) otherwise, with the special tokens of the DeepSeek-V3
// tokenizer for DeepSeek's templates and of the Qwen3 one for the others
// (Kimi's templates use none).
func goldenTemplate(t *testing.T, name string) *chattemplate.Template {
	t.Helper()
	var tm *chattemplate.Template
	var err error
	if dir, ok := strings.CutSuffix(name, "/tokenizer_config.json"); ok {
		tm, err = chattemplate.Load(filepath.Join(goldenDir, dir))
	} else {
		tokDir := "qwen3"
		if strings.HasPrefix(strings.ToLower(filepath.Base(name)), "deepseek") {
			tokDir = "deepseek-v3"
		}
		tm, err = chattemplate.LoadFile(filepath.Join(goldenDir, name), filepath.Join(goldenDir, tokDir))
	}
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// promptServer is a test server whose model records each prompt (as text,
// through the byte-level tokenizer) and answers with EOS at once.
type promptServer struct {
	*testServer
	mu      sync.Mutex
	prompts []string
}

func newPromptServer(t *testing.T, tmpl ChatTemplate) *promptServer {
	ps := &promptServer{}
	script := func(tokens []int32) (int32, bool) {
		ps.mu.Lock()
		ps.prompts = append(ps.prompts, fakemodel.Tokenizer{}.Decode(tokens))
		ps.mu.Unlock()
		return fakemodel.IMEnd, true
	}
	ps.testServer = newTestServer(t, fakemodel.Config{Script: script, EOS: fakemodel.IMEnd}, engine.Config{}, func(o *Options) { o.Template = tmpl })
	return ps
}

// prompt sends a chat request and returns the prompt the model saw.
func (ps *promptServer) prompt(t *testing.T, body []byte) (string, int, []byte) {
	t.Helper()
	ps.mu.Lock()
	ps.prompts = nil
	ps.mu.Unlock()
	code, resp := ps.post(t, "/v1/chat/completions", string(body))
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if code != 200 {
		return "", code, resp
	}
	// The script sees the sequence after every prefill chunk; the last
	// (longest) is the whole prompt.
	if len(ps.prompts) == 0 {
		t.Fatal("the model saw no prompt")
	}
	return ps.prompts[len(ps.prompts)-1], code, resp
}

// rawChatBody builds a request body from raw JSON pieces, so that the
// messages and tools keep their bytes (and key order) exactly.
func rawChatBody(messages, tools, kwargs json.RawMessage) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model": %q, "max_tokens": 1, "temperature": 0, "messages": %s`, modelName, messages)
	if len(tools) > 0 {
		fmt.Fprintf(&b, `, "tools": %s`, tools)
	}
	if len(kwargs) > 0 && string(kwargs) != "{}" {
		fmt.Fprintf(&b, `, "chat_template_kwargs": %s`, kwargs)
	}
	b.WriteString("}")
	return b.Bytes()
}

// hasStringArguments reports whether a tool call of messages has its
// arguments as a JSON string.
func hasStringArguments(t *testing.T, messages json.RawMessage) bool {
	var ms []struct {
		ToolCalls []struct {
			Function struct {
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(messages, &ms); err != nil {
		t.Fatalf("messages %s: %v", messages, err)
	}
	for _, m := range ms {
		for _, c := range m.ToolCalls {
			if bytes.HasPrefix(c.Function.Arguments, []byte(`"`)) {
				return true
			}
		}
	}
	return false
}

func lastRole(t *testing.T, messages json.RawMessage) string {
	var ms []struct {
		Role string `json:"role"`
	}
	if err := json.Unmarshal(messages, &ms); err != nil || len(ms) == 0 {
		t.Fatalf("messages %s: %v", messages, err)
	}
	return ms[len(ms)-1].Role
}

// TestChatPromptMatchesHF sends the golden conversations (tools with
// unsorted schema keys, tool calls with unsorted and nested arguments,
// reasoning, unicode) through /v1/chat/completions and checks that the
// prompt the model receives is byte-identical to transformers' rendering.
func TestChatPromptMatchesHF(t *testing.T) {
	convs, cases := readGolden(t)
	servers := map[string]*promptServer{}
	checked, withTools := 0, 0
	for _, c := range cases {
		conv := convs[c.Conversation]
		// The server always asks for the generation prompt; a final
		// assistant message is continued or becomes a user turn (SGLang),
		// and image parts are refused (text-only models).
		// Tool-call arguments sent as strings are parsed before rendering
		// (TestStringToolCallArguments), so those renderings differ.
		if c.Output == nil || !c.AddGenerationPrompt || lastRole(t, conv.Messages) == "assistant" || c.Conversation == "vision_parts" ||
			hasStringArguments(t, conv.Messages) {
			continue
		}
		ps := servers[c.Template]
		if ps == nil {
			ps = newPromptServer(t, goldenTemplate(t, c.Template))
			servers[c.Template] = ps
		}
		name := c.Template + "/" + c.Conversation + "/" + string(c.ChatTemplateKwargs)
		got, code, resp := ps.prompt(t, rawChatBody(conv.Messages, conv.Tools, c.ChatTemplateKwargs))
		if code != 200 {
			t.Errorf("%s: %d %s", name, code, resp)
			continue
		}
		if got != *c.Output {
			t.Errorf("%s: prompt differs from transformers'\ngot:\n%s\nwant:\n%s", name, got, *c.Output)
		}
		checked++
		if len(conv.Tools) > 0 {
			withTools++
		}
	}
	t.Logf("%d golden renderings identical to transformers' (%d with tools)", checked, withTools)
	if checked < 100 || withTools < 40 {
		t.Errorf("only %d golden renderings checked (%d with tools)", checked, withTools)
	}
	// The schemas really are unsorted: sorting the keys would change the
	// prompt (the bug this guards against).
	conv := convs["tools_user"]
	var sorted any
	_ = json.Unmarshal(conv.Tools, &sorted)
	sortedTools, _ := json.Marshal(sorted)
	got, _, _ := servers["qwen3/tokenizer_config.json"].prompt(t, rawChatBody(conv.Messages, sortedTools, nil))
	for _, c := range cases {
		if c.Template == "qwen3/tokenizer_config.json" && c.Conversation == "tools_user" && c.AddGenerationPrompt && string(c.ChatTemplateKwargs) == "{}" && got == *c.Output {
			t.Error("tools with sorted keys render like the client's order: the test proves nothing")
		}
	}
}

// stringArguments re-encodes every tool call's arguments object as a JSON
// string (OpenAI's wire form), keeping the key order.
func stringArguments(t *testing.T, messages json.RawMessage) json.RawMessage {
	t.Helper()
	var ms []json.RawMessage
	if err := json.Unmarshal(messages, &ms); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		o, err := parseObject(m)
		if err != nil {
			t.Fatal(err)
		}
		calls, ok := o.get("tool_calls")
		if !ok {
			continue
		}
		var cs []json.RawMessage
		_ = json.Unmarshal(calls, &cs)
		for j, c := range cs {
			co, _ := parseObject(c)
			fnRaw, _ := co.get("function")
			fn, _ := parseObject(fnRaw)
			args, _ := fn.get("arguments")
			s, _ := json.Marshal(string(args))
			fn.set("arguments", s)
			co.set("function", mustMarshal(fn))
			cs[j] = mustMarshal(co)
		}
		o.set("tool_calls", jsonArray(cs))
		ms[i] = mustMarshal(o)
	}
	return jsonArray(ms)
}

// TestStringToolCallArguments: arguments sent as JSON strings are parsed
// before rendering (as SGLang does), so templates that iterate over them
// (Qwen3-Coder, Qwen3.5) render exactly what transformers renders for the
// objects; an argument string that is not a JSON object is a 400 naming
// the field.
func TestStringToolCallArguments(t *testing.T) {
	convs, cases := readGolden(t)
	servers := map[string]*promptServer{}
	checked := 0
	for _, c := range cases {
		if c.Output == nil || !c.AddGenerationPrompt || string(c.ChatTemplateKwargs) != "{}" ||
			(c.Conversation != "tool_call_round_trip" && c.Conversation != "tool_call_with_text_and_nested_args" && c.Conversation != "tool_result_last") {
			continue
		}
		conv := convs[c.Conversation]
		msgs := stringArguments(t, conv.Messages)
		if !bytes.Contains(msgs, []byte(`"arguments":"{`)) {
			t.Fatalf("%s: arguments not re-encoded: %s", c.Conversation, msgs)
		}
		ps := servers[c.Template]
		if ps == nil {
			ps = newPromptServer(t, goldenTemplate(t, c.Template))
			servers[c.Template] = ps
		}
		got, code, resp := ps.prompt(t, rawChatBody(msgs, conv.Tools, nil))
		if code != 200 {
			t.Errorf("%s/%s: %d %s", c.Template, c.Conversation, code, resp)
			continue
		}
		if got != *c.Output {
			t.Errorf("%s/%s: string arguments render differently from objects\ngot:\n%s\nwant:\n%s", c.Template, c.Conversation, got, *c.Output)
		}
		checked++
	}
	t.Logf("%d renderings with string arguments identical to transformers' with objects", checked)
	if checked < 12 { // 3 conversations × 5 templates, less any error cases
		t.Errorf("only %d renderings checked", checked)
	}

	ps := newPromptServer(t, goldenTemplate(t, "templates/Qwen3-Coder.jinja"))
	for _, c := range []struct{ args, field string }{
		{`"{\"city\": "`, "messages[1].tool_calls[1].function.arguments"},
		{`"[1, 2]"`, "messages[1].tool_calls[1].function.arguments"},
		{`"\"Paris\""`, "messages[1].tool_calls[1].function.arguments"},
		{`""`, "messages[1].tool_calls[1].function.arguments"},
	} {
		msgs := `[{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null, "tool_calls": [` +
			`{"type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Oslo\"}"}},` +
			`{"type": "function", "function": {"name": "w", "arguments": ` + c.args + `}}]}, {"role": "tool", "content": "cold"}]`
		_, code, resp := ps.prompt(t, rawChatBody(json.RawMessage(msgs), nil, nil))
		var e struct {
			Error struct{ Message, Param string }
		}
		_ = json.Unmarshal(resp, &e)
		if code != 400 || e.Error.Param != c.field || !strings.Contains(e.Error.Message, c.field) {
			t.Errorf("arguments %s: %d %s, want a 400 naming %s", c.args, code, resp, c.field)
		}
	}
	// The server still serves.
	if _, code, resp := ps.prompt(t, rawChatBody(json.RawMessage(`[{"role": "user", "content": "hi"}]`), nil, nil)); code != 200 {
		t.Errorf("after the bad requests: %d %s", code, resp)
	}
}

// TestMessageNormalization covers what the server changes before
// rendering: developer → system, text parts joined, nulls dropped, a final
// assistant message continued or turned into a user turn.
func TestMessageNormalization(t *testing.T) {
	tm, err := chattemplate.Parse(`{% for m in messages %}{{ m | tojson }}|{% endfor %}{{ add_generation_prompt }}|{{ tools | tojson }}|{{ reasoning_effort }}|{{ enable_thinking }}`)
	if err != nil {
		t.Fatal(err)
	}
	ps := newPromptServer(t, tm)
	for _, c := range []struct{ body, want string }{
		{`{"messages": [{"role": "developer", "content": "Be brief.", "name": null}, {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "role": "user"}], "max_tokens": 1}`,
			`{"role": "system", "content": "Be brief."}|{"content": "a b", "role": "user"}|True|null||`},
		{`{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}], "continue_final_message": true, "max_tokens": 1}`,
			`{"role": "user", "content": "Hi"}|True|null||Hel`},
		{`{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel", "x": 1}], "max_tokens": 1}`,
			`{"role": "user", "content": "Hi"}|{"role": "user", "content": "Hel"}|True|null||`},
		{`{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}], "tool_choice": "none", "max_tokens": 1}`,
			`{"role": "user", "content": "Hi"}|True|null||`},
		{`{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"parameters": {"z": 1, "a": 2}, "name": "f"}}], "max_tokens": 1, "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": false, "reasoning_effort": "high"}}`,
			`{"role": "user", "content": "Hi"}|True|[{"type": "function", "function": {"parameters": {"z": 1, "a": 2}, "name": "f"}}]|high|False`},
	} {
		got, code, resp := ps.prompt(t, []byte(c.body))
		if code != 200 || got != c.want {
			t.Errorf("%s:\n got %q (%d %s)\nwant %q", c.body, got, code, resp, c.want)
		}
	}
	for _, c := range []struct{ body, param string }{
		{`{"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": [1]}`, "chat_template_kwargs"},
		{`{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": 5}}]}`, "tools[0]"},
		{`{"messages": [{"role": "user", "content": "Hi"}], "tools": {"type": "function"}}`, "tools"},
		{`{"messages": [{"role": "assistant", "content": "x", "tool_calls": {"a": 1}}]}`, "messages[0].tool_calls"},
		{`{"messages": [{"role": "assistant", "content": "x", "tool_calls": [3]}]}`, "messages[0].tool_calls[0]"},
		{`{"messages": [{"role": "user", "content": 5}]}`, "messages[0].content"},
		{`{"messages": [["user", "hi"]]}`, "messages[0]"},
	} {
		_, code, resp := ps.prompt(t, []byte(c.body))
		var e struct {
			Error struct{ Param string }
		}
		_ = json.Unmarshal(resp, &e)
		if code != 400 || e.Error.Param != c.param {
			t.Errorf("%s: %d %s, want a 400 naming %s", c.body, code, resp, c.param)
		}
	}
}

// TestQwen3PromptIDs renders with Qwen3's own template and tokenizer and
// checks the ids against Hugging Face's (shared/reference/test-assets.md
// §2: tokenizers + transformers' apply_chat_template).
func TestQwen3PromptIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the full Qwen3 tokenizer (seconds under -race)")
	}
	tok, err := tokenizer.Load("../tokenizer/testdata")
	if err != nil {
		t.Skipf("no Qwen3 tokenizer: %v", err)
	}
	req := &chatRequest{Messages: []json.RawMessage{json.RawMessage(`{"role": "user", "content": "你好 🤖 func main(){}"}`)},
		ChatTemplateKwargs: json.RawMessage(`{"enable_thinking": false}`)}
	in, err := buildChatInput(req)
	if err != nil {
		t.Fatal(err)
	}
	text, err := goldenTemplate(t, "qwen3/tokenizer_config.json").Render(in.conv)
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{151644, 872, 198, 108386, 11162, 97, 244, 2915, 1887, 368, 6257, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271}
	if got := tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("ids %v\nwant %v", got, want)
	}
}
