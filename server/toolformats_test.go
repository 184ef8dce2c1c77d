package server

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ktserve/kt/constraint"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

func weatherTools() []toolDef {
	var tools []toolDef
	for _, name := range []string{"get_current_weather", "get_weather", "get-weather"} {
		var t toolDef
		t.Type = "function"
		t.Function.Name = name
		t.Function.Parameters = json.RawMessage(`{"type": "object", "properties": {"location": {"type": "string"}, "city": {"type": "string"}}}`)
		tools = append(tools, t)
	}
	return tools
}

// runSection feeds out to a section extractor in parts and returns the
// streamed text, the non-streamed answer and the calls as "ID NAME ARGS".
func runSection(parser string, history int, parts []string) (streamed, answer string, calls []string) {
	x := &toolExtractor{tools: weatherTools(), prefix: "t", section: sectionFormats[parser], history: history}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(x.feed(p, false))
	}
	b.WriteString(x.feed("", true))
	for _, c := range x.calls {
		calls = append(calls, c.ID+" "+c.Function.Name+" "+c.Function.Arguments)
	}
	return b.String(), x.answer(b.String()), calls
}

// TestSectionFormats reads DeepSeek-V3, DeepSeek-V3.1 and Kimi-K2 output
// as SGLang's deepseekv3, deepseekv31 and kimi_k2 detectors do (one-shot
// parse), whatever the streaming chunks. Streamed answers are not stripped
// (the stripped whitespace goes out before the section is seen).
func TestSectionFormats(t *testing.T) {
	const (
		v3Tokyo  = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_current_weather\n```json\n{\"location\": \"Tokyo\"}\n```<｜tool▁call▁end｜>"
		v3Paris  = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_current_weather\n```json\n{\"location\": \"Paris\"}\n```<｜tool▁call▁end｜>"
		v31Tokyo = "<｜tool▁call▁begin｜>get_current_weather<｜tool▁sep｜>{\"location\": \"Tokyo\"}<｜tool▁call▁end｜>"
		v31Paris = "<｜tool▁call▁begin｜>get_current_weather<｜tool▁sep｜>{\"location\": \"Paris\"}<｜tool▁call▁end｜>"
		eos      = "<｜end▁of▁sentence｜>"
	)
	for _, tc := range []struct {
		name, parser string
		history      int
		out          string
		streamed     string // "" means: the answer
		answer       string
		calls        []string
	}{
		// DeepSeek-V3-0324: two calls, the model's end-of-sentence text kept.
		{"v3 two calls", "deepseekv3", 0, "<｜tool▁calls▁begin｜>" + v3Tokyo + "\n" + v3Paris + "<｜tool▁calls▁end｜>" + eos,
			"", "", []string{`call_t_0 get_current_weather {"location": "Tokyo"}`, `call_t_1 get_current_weather {"location": "Paris"}`}},
		{"v3 text before", "deepseekv3", 0, "Let me look that up.\n\n<｜tool▁calls▁begin｜>" + v3Tokyo + "<｜tool▁calls▁end｜>",
			"Let me look that up.\n\n", "Let me look that up.", []string{`call_t_0 get_current_weather {"location": "Tokyo"}`}},
		{"v3 compact and unicode arguments re-encoded", "deepseekv3", 0,
			"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"杭州\",\"days\":3,\"t\":1.50}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			"", "", []string{`call_t_0 get_weather {"city": "杭州", "days": 3, "t": 1.5}`}},
		{"v3 arguments over lines", "deepseekv3", 0,
			"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\n  \"city\": \"Oslo\",\n  \"unit\": [\"c\"]\n}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			"", "", []string{`call_t_0 get_weather {"city": "Oslo", "unit": ["c"]}`}},
		{"v3 empty arguments", "deepseekv3", 0,
			"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n[]\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			"", "", []string{`call_t_0 get_weather {}`}},
		{"v3 unknown tool dropped", "deepseekv3", 0,
			" Sure. <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>send_mail\n```json\n{\"to\": \"a\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			" Sure. ", "Sure.", nil},
		{"v3 bad json: all answer", "deepseekv3", 0,
			"ok <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": }\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			"", "ok <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": }\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", nil},
		{"v3 unfenced: all answer", "deepseekv3", 0,
			"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n{\"city\": \"Rome\"}<｜tool▁call▁end｜>",
			"", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n{\"city\": \"Rome\"}<｜tool▁call▁end｜>", nil},
		{"v3 cut off inside the section", "deepseekv3", 0, "<｜tool▁calls▁begin｜>" + v3Tokyo + "\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_wea",
			"", "", []string{`call_t_0 get_current_weather {"location": "Tokyo"}`}},
		{"v3 text after the section dropped", "deepseekv3", 0, "<｜tool▁calls▁begin｜>" + v3Tokyo + "<｜tool▁calls▁end｜>\nDone.",
			"", "", []string{`call_t_0 get_current_weather {"location": "Tokyo"}`}},
		{"v3 plain answer untouched", "deepseekv3", 0, "\n```json\n{\"a\": 1}\n```\n", "", "\n```json\n{\"a\": 1}\n```\n", nil},

		// DeepSeek-V3.1: bare JSON after the separator.
		{"v31 two calls", "deepseekv31", 0, "<｜tool▁calls▁begin｜>" + v31Tokyo + v31Paris + "<｜tool▁calls▁end｜>" + eos,
			"", "", []string{`call_t_0 get_current_weather {"location": "Tokyo"}`, `call_t_1 get_current_weather {"location": "Paris"}`}},
		{"v31 text before, compact arguments", "deepseekv31", 0,
			"I'll check.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\":\"Lima\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			"I'll check.\n", "I'll check.", []string{`call_t_0 get_weather {"city": "Lima"}`}},
		{"v31 bad json: all answer", "deepseekv31", 0, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{city}<｜tool▁call▁end｜>",
			"", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{city}<｜tool▁call▁end｜>", nil},

		// Kimi-K2: ids continue the conversation's count; arguments as written.
		{"kimi one call", "kimi_k2", 0,
			"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|><|tool_calls_section_end|>",
			"", "", []string{`functions.get_weather:0 get_weather {"city": "Beijing"}`}},
		{"kimi two calls with spaces, history 2", "kimi_k2", 2,
			"I'll check both. <|tool_calls_section_begin|>\n<|tool_call_begin|> functions.get_weather:0 <|tool_call_argument_begin|> {\"city\":\"Paris\"} <|tool_call_end|>\n<|tool_call_begin|>functions.get_current_weather:1<|tool_call_argument_begin|>{\"location\": \"杭州\"}<|tool_call_end|>\n<|tool_calls_section_end|>",
			"", "I'll check both. ", []string{`functions.get_weather:2 get_weather {"city":"Paris"}`, `functions.get_current_weather:3 get_current_weather {"location": "杭州"}`}},
		{"kimi arguments over lines dropped", "kimi_k2", 0,
			"x<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\n\"city\": \"Rome\"}<|tool_call_end|><|tool_calls_section_end|>",
			"", "x", nil},
		{"kimi hyphenated name dropped", "kimi_k2", 0,
			"<|tool_calls_section_begin|><|tool_call_begin|>functions.get-weather:0<|tool_call_argument_begin|>{\"city\": \"Rome\"}<|tool_call_end|><|tool_calls_section_end|>",
			"", "", nil},
		{"kimi id without functions prefix", "kimi_k2", 0,
			"<|tool_calls_section_begin|><|tool_call_begin|>get_weather:7<|tool_call_argument_begin|>{\"city\": \"Rome\"}<|tool_call_end|><|tool_calls_section_end|>",
			"", "", []string{`functions.get_weather:0 get_weather {"city": "Rome"}`}},
		{"kimi plain answer", "kimi_k2", 0, "Paris is sunny.", "", "Paris is sunny.", nil},
	} {
		for _, parts := range chunkings(tc.out) {
			streamed, answer, calls := runSection(tc.parser, tc.history, parts)
			want := tc.streamed
			if want == "" {
				want = tc.answer
			}
			if streamed != want || answer != tc.answer || strings.Join(calls, "|") != strings.Join(tc.calls, "|") {
				t.Errorf("%s in %d parts: streamed %q answer %q calls %q; want %q %q %q", tc.name, len(parts), streamed, answer, calls, want, tc.answer, tc.calls)
				break
			}
		}
	}
}

// TestReasoningFormats: the reasoning parsers for DeepSeek and Kimi
// models split their output as SGLang's do, streamed in any chunks.
func TestReasoningFormats(t *testing.T) {
	yes, no := true, false
	const kimiTools = "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"
	for _, tc := range []struct {
		parser, prompt     string
		thinking           *bool
		out                string
		reasoning, content string
	}{
		// DeepSeek-R1: the prompt opens the block (or the model does).
		{"deepseek-r1", "<｜User｜>hi<｜Assistant｜><think>\n", nil, "Greeting.\n</think>\n\nHello!", "Greeting.\n", "Hello!"},
		{"deepseek-r1", "<｜User｜>hi<｜Assistant｜>", nil, "<think>\nGreeting.\n</think>\n\nHello!", "Greeting.\n", "Hello!"},
		{"deepseek-r1", "<｜User｜>hi<｜Assistant｜>", nil, "Greeting.</think>Hello!", "Greeting.", "Hello!"},
		// DeepSeek-V3.1: thinking only when the request turns it on.
		{"deepseek-v3", "<｜User｜>hi<｜Assistant｜><think>", &yes, "Greeting.</think>Hello!", "Greeting.", "Hello!"},
		{"deepseek-v3", "<｜User｜>hi<｜Assistant｜></think>", nil, "Hello!", "", "Hello!"},
		{"deepseek-v3", "<｜User｜>hi<｜Assistant｜></think>", &no, "Hello! a </think> b", "", "Hello! a </think> b"},
		{"deepseek-v3", "<｜User｜>hi<｜Assistant｜>", &yes, "Hmm</think>Hello!", "Hmm", "Hello!"},
		{"deepseek-v3", "<｜User｜>hi<｜Assistant｜><think>", nil, "Hmm</think>Hello!", "Hmm", "Hello!"},
		// Kimi thinking models: ◁think▷...◁/think▷ when the output opens it.
		{"kimi", "<|im_assistant|>assistant<|im_middle|>", nil, "◁think▷Let me see.◁/think▷It is 4.", "Let me see.", "It is 4."},
		{"kimi", "<|im_assistant|>assistant<|im_middle|>", nil, "It is 4.", "", "It is 4."},
		// Kimi-K2-Thinking: thinking unless turned off; the tool section ends it.
		{"kimi_k2", "<|im_assistant|>assistant<|im_middle|>", nil, "<think>Weather needed.</think>Checking.", "Weather needed.", "Checking."},
		{"kimi_k2", "<|im_assistant|>assistant<|im_middle|>", nil, "Weather needed." + kimiTools, "Weather needed.", kimiTools},
		{"kimi_k2", "<|im_assistant|>assistant<|im_middle|>", &no, "Hi <think>x</think>", "", "Hi <think>x</think>"},
		{"kimi_k2", "<|im_assistant|>assistant<|im_middle|>", nil, "cut off", "cut off", ""},
		// Qwen3.5 may start a tool call inside the block.
		{"qwen3", "<|im_start|>assistant\n<think>\n", nil, "need a tool\n<tool_call>\n{}\n</tool_call>", "need a tool\n", "<tool_call>\n{}\n</tool_call>"},
	} {
		for _, parts := range chunkings(tc.out) {
			rs, cs := splitReasoning(reasoningFormatFor(tc.parser, tc.prompt, tc.thinking), parts)
			if rs != tc.reasoning || cs != tc.content {
				t.Errorf("%s %q in %d parts: reasoning %q content %q, want %q %q", tc.parser, tc.out, len(parts), rs, cs, tc.reasoning, tc.content)
				break
			}
		}
	}
	if reasoningFormatFor("none", "", nil) != nil || reasoningFormatFor("glm45", "", nil) != nil {
		t.Error("a parser kt does not implement has a format")
	}
}

// TestForcedSectionFormats: tool_choice required under the section parsers
// compiles to a constraint whose outputs the same parser reads back.
func TestForcedSectionFormats(t *testing.T) {
	tools := weatherTools()[:2]
	for _, tc := range []struct {
		parser string
		form   toolForm
		ok     []string // outputs the constraint accepts, read back as calls
		bad    []string
	}{
		{"deepseekv3", formDeepSeekV3,
			[]string{"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_current_weather\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
			[]string{"<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>nope\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}},
		{"deepseekv31", formDeepSeekV31,
			[]string{"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
			[]string{"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>[1]<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}},
		{"kimi_k2", formKimiK2,
			[]string{"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|><|tool_call_begin|>functions.get_current_weather:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"},
			[]string{"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
				"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\n\"city\": \"Oslo\"}<|tool_call_end|>"}},
	} {
		tag, err := toolCallFormat(tools, tc.form, true)
		if err != nil {
			t.Fatalf("%s: %v", tc.parser, err)
		}
		dfa, err := constraint.CompileStructuralTag(tag)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.parser, err, tag)
		}
		for _, s := range tc.ok {
			if !dfa.Match(s) {
				t.Errorf("%s: constraint refuses %q", tc.parser, s)
			}
			if _, _, calls := runSection(tc.parser, 0, []string{s}); len(calls) != 2 {
				t.Errorf("%s: %q reads back as %q", tc.parser, s, calls)
			}
		}
		for _, s := range tc.bad {
			if dfa.Match(s) {
				t.Errorf("%s: constraint accepts %q", tc.parser, s)
			}
		}
		single, err := toolCallFormat(tools, tc.form, false)
		if err != nil {
			t.Fatal(err)
		}
		if one, err := constraint.CompileStructuralTag(single); err != nil || one.Match(tc.ok[0]) {
			t.Errorf("%s: parallel_tool_calls false still accepts two calls (%v)", tc.parser, err)
		}
	}
}

// FuzzSectionFormats: any output, cut anywhere, parses without panicking;
// streamed and one-shot reads agree, and the streamed text plus the held
// section is the output.
func FuzzSectionFormats(f *testing.F) {
	for _, s := range []string{
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		"a<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": 1e400}<｜tool▁call▁end｜>",
		"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|>",
		"<｜tool▁calls▁b", "<|tool_calls_section_begin|>", "plain",
	} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, out string, cut uint8) {
		if !utf8.ValidString(out) || len(out) > 2048 {
			return
		}
		for _, parser := range []string{"deepseekv3", "deepseekv31", "kimi_k2"} {
			k := int(cut)%8 + 1
			var parts []string
			for i := 0; i < len(out); i += k {
				parts = append(parts, out[i:min(i+k, len(out))])
			}
			s1, a1, c1 := runSection(parser, 0, parts)
			s2, a2, c2 := runSection(parser, 0, []string{out})
			if s1 != s2 || a1 != a2 || strings.Join(c1, "|") != strings.Join(c2, "|") {
				t.Fatalf("%s %q: chunked %q %q %q, whole %q %q %q", parser, out, s1, a1, c1, s2, a2, c2)
			}
			begin := sectionFormats[parser].begin
			if i := strings.Index(out, begin); i >= 0 && !strings.HasPrefix(out, s1) {
				t.Fatalf("%s %q: streamed %q is not a prefix", parser, out, s1)
			} else if i < 0 && s1 != out {
				t.Fatalf("%s %q: no section, streamed %q", parser, out, s1)
			}
			for _, c := range c1 {
				// Arguments are what Python's json.dumps writes (Infinity for 1e400).
				if fields := strings.SplitN(c, " ", 3); len(fields) != 3 || fields[1] == "" || fields[2] == "" {
					t.Fatalf("%s %q: call %q lacks a name or arguments", parser, out, c)
				}
			}
		}
	})
}

// chatResult is one choice of a chat answer, streamed or not.
type chatResult struct {
	content, reasoning, finish string
	calls                      []string // "ID NAME ARGS"
}

func chatOnce(t *testing.T, ts *testServer, body map[string]any, stream bool) chatResult {
	t.Helper()
	var r chatResult
	if !stream {
		code, raw := ts.post(t, "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		var resp chatResponse
		if err := json.Unmarshal(raw, &resp); err != nil {
			t.Fatal(err)
		}
		m := resp.Choices[0].Message
		if m.Content != nil {
			r.content = *m.Content
		}
		if m.ReasoningContent != nil {
			r.reasoning = *m.ReasoningContent
		}
		r.finish = *resp.Choices[0].FinishReason
		for _, c := range m.ToolCalls {
			r.calls = append(r.calls, c.ID+" "+c.Function.Name+" "+c.Function.Arguments)
		}
		return r
	}
	b := map[string]any{"stream": true}
	for k, v := range body {
		b[k] = v
	}
	text, chunks, err := streamChat(ts.url, b)
	if err != nil {
		t.Fatal(err)
	}
	r.content = text
	for _, c := range chunks {
		for _, ch := range c["choices"].([]any) {
			chm := ch.(map[string]any)
			d := chm["delta"].(map[string]any)
			if s, ok := d["reasoning_content"].(string); ok {
				r.reasoning += s
			}
			if tc, ok := d["tool_calls"]; ok {
				data, _ := json.Marshal(tc)
				var cs []gotCall
				_ = json.Unmarshal(data, &cs)
				for _, c := range cs {
					r.calls = append(r.calls, c.ID+" "+c.Function.Name+" "+c.Function.Arguments)
				}
			}
			if f, ok := chm["finish_reason"].(string); ok {
				r.finish = f
			}
		}
	}
	return r
}

// TestDeepSeekKimiChat runs DeepSeek and Kimi output through
// /v1/chat/completions with their reasoning and tool-call parsers,
// streamed and not.
func TestDeepSeekKimiChat(t *testing.T) {
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}}
	history := []map[string]any{
		{"role": "user", "content": "Weather in Oslo and Rome?"},
		{"role": "assistant", "content": nil, "tool_calls": []any{
			map[string]any{"id": "functions.get_weather:0", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Oslo"}`}},
			map[string]any{"id": "functions.get_weather:1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Rome"}`}}}},
		{"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "5 C"},
		{"role": "tool", "tool_call_id": "functions.get_weather:1", "content": "20 C"},
	}
	const (
		v3Call   = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
		v31Call  = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
		kimiCall = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>"
	)
	type want struct{ content, reasoning, finish, call string }
	for _, tc := range []struct {
		name, reasoningParser, toolParser string
		out                               string
		kwargs                            map[string]any
		withHistory                       bool
		want                              want
		wantStreamed                      string // streamed content when it differs
	}{
		{"r1 thinks then calls", "deepseek-r1", "deepseekv3", "Weather is needed.\n</think>\n\nLet me check. " + v3Call, nil, false,
			want{"Let me check.", "Weather is needed.\n", "tool_calls", `get_weather {"city": "Paris"}`}, "Let me check. "},
		{"r1 answers", "deepseek-r1", "deepseekv3", "<think>\nEasy.\n</think>\n\nParis is nice.", nil, false,
			want{"Paris is nice.", "Easy.\n", "stop", ""}, ""},
		{"v3.1 thinking on", "deepseek-v3", "deepseekv31", "Need data.</think>" + v31Call, map[string]any{"thinking": true}, false,
			want{"", "Need data.", "tool_calls", `get_weather {"city": "Paris"}`}, ""},
		{"v3.1 thinking off", "deepseek-v3", "deepseekv31", "Sure.</think>" + v31Call, nil, false,
			want{"Sure.</think>", "", "tool_calls", `get_weather {"city": "Paris"}`}, ""},
		{"kimi-k2 thinking, ids after the history", "kimi_k2", "kimi_k2", "<think>Paris next.</think>" + kimiCall, nil, true,
			want{"", "Paris next.", "tool_calls", `get_weather {"city": "Paris"}`}, ""},
		{"kimi-k2 section ends the reasoning", "kimi_k2", "kimi_k2", "Paris next." + kimiCall, nil, false,
			want{"", "Paris next.", "tool_calls", `get_weather {"city": "Paris"}`}, ""},
		{"kimi-k2 thinking off", "kimi_k2", "kimi_k2", "Paris is sunny.", map[string]any{"thinking": false}, false,
			want{"Paris is sunny.", "", "stop", ""}, ""},
	} {
		ts := newTestServer(t, fakemodel.Config{Script: scripted(map[string]string{"ASK": tc.out})}, engine.Config{}, func(o *Options) {
			o.ReasoningParser, o.ToolCallParser = tc.reasoningParser, tc.toolParser
		})
		body := greedyBody("ASK about Paris", 300)
		if tc.withHistory {
			body["messages"] = append(append([]map[string]any{}, history...), map[string]any{"role": "user", "content": "ASK about Paris"})
		}
		body["tools"] = tools
		if tc.kwargs != nil {
			body["chat_template_kwargs"] = tc.kwargs
		}
		for _, stream := range []bool{false, true} {
			got := chatOnce(t, ts, body, stream)
			w := tc.want
			if stream && tc.wantStreamed != "" {
				w.content = tc.wantStreamed
			}
			var call string
			if len(got.calls) == 1 {
				id, rest, _ := strings.Cut(got.calls[0], " ")
				call = rest
				wantID := "call_"
				if tc.toolParser == "kimi_k2" {
					wantID = "functions.get_weather:0"
					if tc.withHistory {
						wantID = "functions.get_weather:2"
					}
				}
				if !strings.HasPrefix(id, wantID) || tc.toolParser == "kimi_k2" && id != wantID {
					t.Errorf("%s stream=%v: id %q, want %s", tc.name, stream, id, wantID)
				}
			}
			if got.content != w.content || got.reasoning != w.reasoning || got.finish != w.finish || call != w.call || len(got.calls) > 1 {
				t.Errorf("%s stream=%v: content %q reasoning %q finish %s calls %q; want %+v", tc.name, stream, got.content, got.reasoning, got.finish, got.calls, w)
			}
		}
	}
}

// FuzzReasoningFormats: every reasoning parser splits any output the same
// way however it is cut, and keeps all text but the block's markers.
func FuzzReasoningFormats(f *testing.F) {
	for _, s := range []string{"<think>a</think>b", "◁think▷a◁/think▷b", "x<|tool_calls_section_begin|>y", "</thi", "<tool_call>{}"} {
		f.Add(s, uint8(2), true)
	}
	f.Fuzz(func(t *testing.T, out string, cut uint8, thinking bool) {
		if len(out) > 1024 {
			return
		}
		for _, parser := range []string{"qwen3", "deepseek-r1", "deepseek-v3", "kimi", "kimi_k2"} {
			rf := reasoningFormatFor(parser, "", &thinking)
			run := func(k int) (string, string) {
				r := newReasoningSplitter(rf)
				var rs, cs strings.Builder
				for i := 0; i < len(out); i += k {
					a, b := r.feed(out[i:min(i+k, len(out))], false)
					rs.WriteString(a)
					cs.WriteString(b)
				}
				a, b := r.feed("", true)
				return rs.String() + a, cs.String() + b
			}
			r1, c1 := run(int(cut)%7 + 1)
			r2, c2 := run(len(out) + 1)
			if r1 != r2 || c1 != c2 {
				t.Fatalf("%s %q: chunked %q %q, whole %q %q", parser, out, r1, c1, r2, c2)
			}
			if len(r1)+len(c1) > len(out) {
				t.Fatalf("%s %q: %q + %q is longer than the output", parser, out, r1, c1)
			}
		}
	})
}
