package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ktserve/kt/constraint"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
	"github.com/ktserve/kt/tokenizer"
)

const (
	weatherParams = `{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}`
	timeParams    = `{"type":"object","properties":{"tz":{"type":"string","enum":["UTC","CET"]},"utc":{"type":"boolean"}},"required":["tz"],"additionalProperties":false}`
)

func testTools() []any {
	tool := func(name, params string) any {
		return map[string]any{"type": "function", "function": map[string]any{"name": name, "description": "d", "parameters": json.RawMessage(params)}}
	}
	return []any{tool("get_weather", weatherParams), tool("get_time", timeParams)}
}

// toolSchemas compiles the tools' parameter schemas for checking answers.
func toolSchemas(t *testing.T) map[string]*jsonschema.Schema {
	out := map[string]*jsonschema.Schema{}
	for name, src := range map[string]string{"get_weather": weatherParams, "get_time": timeParams} {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource(name+".json", doc); err != nil {
			t.Fatal(err)
		}
		if out[name], err = c.Compile(name + ".json"); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

type gotCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type gotChoice struct {
	calls  []gotCall
	finish string
	text   string
}

// chatChoices posts a chat request and returns each choice's tool calls,
// finish reason and content, from the JSON answer or the joined stream.
func chatChoices(t *testing.T, ts *testServer, body map[string]any) []gotChoice {
	t.Helper()
	code, raw := ts.post(t, "/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	if body["stream"] != true {
		var r struct {
			Choices []struct {
				Message struct {
					Content   *string   `json:"content"`
					ToolCalls []gotCall `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		var out []gotChoice
		for _, c := range r.Choices {
			g := gotChoice{calls: c.Message.ToolCalls, finish: c.FinishReason}
			if c.Message.Content != nil {
				g.text = *c.Message.Content
			}
			out = append(out, g)
		}
		return out
	}
	out := map[int]*gotChoice{}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok || payload == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content   *string   `json:"content"`
					ToolCalls []gotCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(payload), &ch); err != nil {
			t.Fatalf("%v: %s", err, payload)
		}
		for _, c := range ch.Choices {
			g := out[c.Index]
			if g == nil {
				g = &gotChoice{}
				out[c.Index] = g
				n = max(n, c.Index+1)
			}
			if c.Delta.Content != nil {
				g.text += *c.Delta.Content
			}
			g.calls = append(g.calls, c.Delta.ToolCalls...)
			if c.FinishReason != nil {
				g.finish = *c.FinishReason
			}
		}
	}
	res := make([]gotChoice, n)
	for i := range n {
		res[i] = *out[i]
	}
	return res
}

// TestToolChoiceForced: tool_choice required and named force tool calls in
// the format of each tool-call parser (and SGLang's JSON array without
// one), streaming and not: the answer has tool_calls naming an offered
// tool (the named one), arguments valid under its schema, finish_reason
// tool_calls, whether the model meant to call a tool (CALL), answered in
// text (TEXT) or answers at random.
func TestToolChoiceForced(t *testing.T) {
	schemas := toolSchemas(t)
	for _, parser := range []string{"qwen25", "qwen3_coder", "none", "deepseekv3", "deepseekv31", "kimi_k2"} {
		script := scripted(map[string]string{
			"CALL": map[string]string{
				"qwen25":      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 3}}\n</tool_call>",
				"qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
				"none":        `[{"name": "get_weather", "parameters": {"city": "Rome", "days": 3}}]`,
				"deepseekv3":  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Rome\", \"days\": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
				"deepseekv31": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Rome\", \"days\": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
				"kimi_k2":     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Rome\", \"days\": 3}<|tool_call_end|><|tool_calls_section_end|>",
			}[parser],
			"TEXT": "I would rather not call a tool.",
		})
		ts := newTestServer(t, fakemodel.Config{Script: script, EOSAfter: 40}, engine.Config{}, func(o *Options) {
			o.ToolCallParser = parser
			o.ReasoningParser = "none"
		})
		for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}} {
			for _, stream := range []bool{false, true} {
				checked := 0
				for _, prompt := range []string{"CALL", "TEXT", "RANDOM"} {
					name := fmt.Sprintf("%s/%v/stream=%v/%s", parser, choice, stream, prompt)
					body := greedyBody(prompt, 400)
					body["tools"] = testTools()
					body["tool_choice"] = choice
					body["stream"] = stream
					if prompt == "RANDOM" {
						body["temperature"] = 1
						body["n"] = 2
						body["seed"] = 7
					}
					for _, c := range chatChoices(t, ts, body) {
						if c.finish == "length" {
							t.Logf("%s: unfinished %q", name, c.text)
							continue
						}
						if c.finish != "tool_calls" || len(c.calls) == 0 {
							t.Errorf("%s: finish %q, %d calls, content %q", name, c.finish, len(c.calls), c.text)
							continue
						}
						if strings.TrimSpace(c.text) != "" {
							t.Errorf("%s: content %q besides the calls", name, c.text)
						}
						for _, call := range c.calls {
							want := call.Function.Name
							if _, named := choice.(map[string]any); named {
								want = "get_time"
							}
							sch := schemas[call.Function.Name]
							if sch == nil || call.Function.Name != want || call.Type != "function" || call.ID == "" {
								t.Errorf("%s: call %+v", name, call)
								continue
							}
							args, err := jsonschema.UnmarshalJSON(strings.NewReader(call.Function.Arguments))
							if err != nil {
								t.Errorf("%s: arguments %q: %v", name, call.Function.Arguments, err)
								continue
							}
							if err := sch.Validate(args); err != nil {
								t.Errorf("%s: arguments %q: %v", name, call.Function.Arguments, err)
							}
							checked++
							if prompt == "CALL" && choice == "required" {
								var a struct {
									City string `json:"city"`
									Days int    `json:"days"`
								}
								_ = json.Unmarshal([]byte(call.Function.Arguments), &a)
								if call.Function.Name != "get_weather" || a.City != "Rome" || a.Days != 3 {
									t.Errorf("%s: the model's own call became %s %s", name, call.Function.Name, call.Function.Arguments)
								}
							}
						}
					}
				}
				if checked < 3 {
					t.Errorf("%s/%v/stream=%v: only %d calls checked", parser, choice, stream, checked)
				}
			}
		}
	}
}

// TestToolChoiceSingleCall: parallel_tool_calls false allows one call.
func TestToolChoiceSingleCall(t *testing.T) {
	two := "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>"
	ts := newTestServer(t, fakemodel.Config{Script: scripted(map[string]string{"TWO": two})}, engine.Config{}, nil)
	for _, parallel := range []bool{true, false} {
		body := greedyBody("TWO", 120)
		body["tools"] = testTools()
		body["tool_choice"] = "required"
		body["parallel_tool_calls"] = parallel
		cs := chatChoices(t, ts, body)
		want := map[bool]int{true: 2, false: 1}[parallel]
		if len(cs) != 1 || len(cs[0].calls) != want || cs[0].finish != "tool_calls" {
			t.Errorf("parallel %v: %+v, want %d calls", parallel, cs, want)
		}
	}
}

func TestToolChoiceErrors(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	for _, tc := range []struct {
		name   string
		mod    func(map[string]any)
		param  string
		inText string
	}{
		{"required without tools", func(b map[string]any) { b["tool_choice"] = "required" }, "tool_choice", "Tools cannot be empty"},
		{"named without tools", func(b map[string]any) {
			b["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": "f"}}
		}, "tool_choice", "Tools cannot be empty"},
		{"unknown name", func(b map[string]any) {
			b["tools"] = testTools()
			b["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}
		}, "tool_choice.function.name", "Tool 'nope' not found"},
		{"bad shape", func(b map[string]any) {
			b["tools"] = testTools()
			b["tool_choice"] = map[string]any{"type": "function"}
		}, "tool_choice", "tool_choice must be"},
		{"bad string", func(b map[string]any) { b["tool_choice"] = "always" }, "tool_choice", "tool_choice must be"},
		{"with response_format", func(b map[string]any) {
			b["tools"] = testTools()
			b["tool_choice"] = "required"
			b["response_format"] = map[string]any{"type": "json_object"}
		}, "tool_choice", "cannot be combined"},
		{"parameters not an object", func(b map[string]any) {
			b["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "parameters": []int{1}}}}
			b["tool_choice"] = "required"
		}, "tools[0].function.parameters", "JSON Schema object"},
		{"parameters schema unsupported", func(b map[string]any) {
			b["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object", "minProperties": 2}}}}
			b["tool_choice"] = "required"
		}, "tool_choice", "minProperties"},
	} {
		b := greedyBody("hi", 10)
		tc.mod(b)
		code, raw := ts.post(t, "/v1/chat/completions", b)
		var e errorBody
		_ = json.Unmarshal(raw, &e)
		if code != 400 || e.Error.Param == nil || *e.Error.Param != tc.param || !strings.Contains(e.Error.Message, tc.inText) {
			t.Errorf("%s: %d %s, want 400 param %q with %q", tc.name, code, raw, tc.param, tc.inText)
		}
	}
}

// TestToolChoiceQwenTokens: with the Qwen3 tokenizer, a call as Qwen
// templates write it, tokenized as the model would emit it, passes the
// forced-call constraint token by token and may end there; a call of a
// tool not offered or with a bad argument does not.
func TestToolChoiceQwenTokens(t *testing.T) {
	tok, err := tokenizer.Load("../tokenizer/testdata")
	if err != nil {
		t.Fatal(err)
	}
	eos := int32(151645)
	v, err := constraint.NewVocab(tok, tok.VocabSize(), []int32{eos})
	if err != nil {
		t.Fatal(err)
	}
	var tools []toolDef
	for _, raw := range testTools() {
		b, _ := json.Marshal(raw)
		var td toolDef
		if err := json.Unmarshal(b, &td); err != nil {
			t.Fatal(err)
		}
		tools = append(tools, td)
	}
	for _, tc := range []struct {
		form toolForm
		text string
		ok   bool
	}{
		{formJSONTag, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 7}}\n</tool_call>", true},
		{formJSONTag, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\", \"utc\": true}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 1}}\n</tool_call>", true},
		{formJSONTag, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 7}}\n</tool_call>", false},
		{formJSONTag, "<tool_call>\n{\"name\": \"send_mail\", \"arguments\": {}}\n</tool_call>", false},
		{formXML, "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>", true},
		{formXML, "<tool_call>\n<function=get_time>\n<parameter=tz>\nCET\n</parameter>\n</function>\n</tool_call>", true},
		{formXML, "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>", false},
		{formArray, `[{"name": "get_time", "parameters": {"tz": "CET"}}]`, true},
		{formArray, `[]`, false},
	} {
		tag, err := toolCallFormat(tools, tc.form, true)
		if err != nil {
			t.Fatal(err)
		}
		d, err := constraint.CompileStructuralTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		c := constraint.NewGrammar(d, v).NewConstraint()
		ok := true
		for _, id := range tok.Encode(tc.text) {
			if !c.Allow(id) {
				ok = false
				break
			}
			c.Advance(id)
		}
		ok = ok && c.Allow(eos)
		if ok != tc.ok {
			t.Errorf("form %d: %q allowed %v, want %v", tc.form, tc.text, ok, tc.ok)
		}
	}
}

// TestNamedToolChoicePrompt: a named choice renders only that tool, as
// SGLang does; "none" renders none.
func TestNamedToolChoicePrompt(t *testing.T) {
	var raws []json.RawMessage
	for _, tl := range testTools() {
		b, _ := json.Marshal(tl)
		raws = append(raws, b)
	}
	for _, tc := range []struct {
		choice      string
		has, hasNot []string
	}{
		{`"auto"`, []string{"get_weather", "get_time"}, nil},
		{`"required"`, []string{"get_weather", "get_time"}, nil},
		{`{"type": "function", "function": {"name": "get_time"}}`, []string{"get_time"}, []string{"get_weather"}},
		{`"none"`, nil, []string{"get_weather", "get_time"}},
	} {
		req := chatRequest{Messages: []json.RawMessage{json.RawMessage(`{"role": "user", "content": "hi"}`)}, Tools: raws, ToolChoice: json.RawMessage(tc.choice)}
		in, err := buildChatInput(&req)
		if err != nil {
			t.Fatal(err)
		}
		rendered := string(in.conv.Tools)
		for _, s := range tc.has {
			if !strings.Contains(rendered, s) {
				t.Errorf("%s: tools %s lack %s", tc.choice, rendered, s)
			}
		}
		for _, s := range tc.hasNot {
			if strings.Contains(rendered, s) {
				t.Errorf("%s: tools %s hold %s", tc.choice, rendered, s)
			}
		}
	}
}
