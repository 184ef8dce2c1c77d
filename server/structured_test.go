package server

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/sashabaranov/go-openai/jsonschema"

	"github.com/ktserve/kt/constraint"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

type station struct {
	ID     string  `json:"id"`
	Height float64 `json:"height"`
}

type weatherReport struct {
	City    string    `json:"city"`
	TempC   int       `json:"temp_c"`
	Unit    string    `json:"unit" enum:"celsius,fahrenheit"`
	Sunny   bool      `json:"sunny"`
	Hourly  []float64 `json:"hourly"`
	Station station   `json:"station"`
}

// TestJSONSchemaWithOpenAIClient asks for response_format json_schema
// (strict, from a Go type, as go-openai builds it) and parses the answers
// with the client library's own schema check: a model that follows the
// schema is left alone, and random or wrong output is held to it.
func TestJSONSchemaWithOpenAIClient(t *testing.T) {
	// go-openai writes properties in key order: city, hourly, station, sunny, temp_c, unit.
	good := `{"city": "Oslo", "hourly": [1.5, -2], "station": {"height": 12.5, "id": "OSL"}, "sunny": false, "temp_c": -3, "unit": "celsius"}`
	ts := newTestServer(t, fakemodel.Config{Script: scripted(map[string]string{
		"GOOD":  good,
		"WRONG": `{"city": 42, "temp_c": "hot"}`,
	})}, engine.Config{}, nil)
	schema, err := jsonschema.GenerateSchemaForType(weatherReport{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(schema)
	dfa, err := constraint.CompileSchema(raw, constraint.SchemaOptions{Strict: true})
	if err != nil {
		t.Fatalf("go-openai's strict schema is refused: %v\n%s", err, raw)
	}
	// Streaming: the deltas join to the scripted answer.
	sreq := chatReq("GOOD", 400)
	sreq.Temperature = 0.0000001
	sreq.ResponseFormat = &openai.ChatCompletionResponseFormat{
		Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
		JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "weather_report", Schema: schema, Strict: true},
	}
	stream, err := ts.client.CreateChatCompletionStream(context.Background(), sreq)
	if err != nil {
		t.Fatal(err)
	}
	var joined strings.Builder
	for {
		chunk, err := stream.Recv()
		if err != nil {
			break
		}
		for _, ch := range chunk.Choices {
			joined.WriteString(ch.Delta.Content)
		}
	}
	stream.Close()
	if joined.String() != good {
		t.Errorf("stream: %q, want the scripted answer", joined.String())
	}
	for _, prompt := range []string{"GOOD", "WRONG", "RANDOM"} {
		req := chatReq(prompt, 400)
		req.Temperature = 0.0000001
		if prompt == "RANDOM" {
			req.Temperature = 1
			req.N = 3
		}
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "weather_report", Schema: schema, Strict: true},
		}
		resp, err := ts.client.CreateChatCompletion(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", prompt, err)
		}
		for _, ch := range resp.Choices {
			got := ch.Message.Content
			if prompt == "GOOD" && got != good {
				t.Errorf("GOOD: %q, want the scripted answer", got)
			}
			if ch.FinishReason != openai.FinishReasonStop {
				if !dfa.Prefix(got) {
					t.Errorf("%s: unfinished output %q is not a prefix of the schema's language", prompt, got)
				}
				continue
			}
			var w weatherReport
			if err := schema.Unmarshal(got, &w); err != nil {
				t.Errorf("%s: %v\n%s", prompt, err, got)
			}
			if w.Unit != "celsius" && w.Unit != "fahrenheit" {
				t.Errorf("%s: unit %q", prompt, w.Unit)
			}
		}
	}
}

// TestGenerateRegexAndSchema drives SGLang's /generate constraints.
func TestGenerateRegexAndSchema(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{EOSAfter: 20}, engine.Config{}, nil)
	phone := regexp.MustCompile(`^\(\d{3}\) \d{3}-\d{4}$`)
	for _, tc := range []struct {
		name   string
		params map[string]any
		check  func(string) bool
	}{
		{"regex", map[string]any{"regex": `\(\d{3}\) \d{3}-\d{4}`}, phone.MatchString},
		{"json_schema string", map[string]any{"json_schema": `{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":[1,2,3]}},"required":["ok","n"]}`},
			func(s string) bool {
				var v struct {
					OK *bool `json:"ok"`
					N  int   `json:"n"`
				}
				return json.Unmarshal([]byte(s), &v) == nil && v.OK != nil && v.N >= 1 && v.N <= 3 && !strings.Contains(s, "extra")
			}},
	} {
		tc.params["max_new_tokens"] = 200
		tc.params["temperature"] = 1
		tc.params["n"] = 2
		code, body := ts.post(t, "/generate", map[string]any{"text": "hi", "sampling_params": tc.params})
		if code != 200 {
			t.Fatalf("%s: %d %s", tc.name, code, body)
		}
		var outs []struct {
			Text string `json:"text"`
			Meta struct {
				FinishReason map[string]any `json:"finish_reason"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal(body, &outs); err != nil {
			t.Fatalf("%s: %v %s", tc.name, err, body)
		}
		for _, o := range outs {
			if o.Meta.FinishReason["type"] == "stop" && !tc.check(o.Text) {
				t.Errorf("%s: %q does not satisfy the constraint", tc.name, o.Text)
			}
			if o.Meta.FinishReason["type"] != "stop" {
				t.Logf("%s: unfinished %q", tc.name, o.Text)
			}
		}
	}
}

// TestJSONSchemaAfterThinking: under a reasoning parser the model may
// think freely first; the schema holds from the end of the think block.
func TestJSONSchemaAfterThinking(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{Script: scripted(map[string]string{
		"THINK": "<think>\nthe answer is {{1}}\n</think>\n\n{\"a\": 1}",
		"PLAIN": "{\"a\": 2}",
	})}, engine.Config{}, nil)
	for _, tc := range []struct{ prompt, reasoning, content string }{
		{"THINK", "the answer is {{1}}", `{"a": 1}`},
		{"PLAIN", "", `{"a": 2}`},
	} {
		b := greedyBody(tc.prompt, 80)
		b["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{
			"name": "a", "schema": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "integer"}}, "required": []string{"a"}}}}
		code, body := ts.post(t, "/v1/chat/completions", b)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var r struct {
			Choices []struct {
				Message struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		m := r.Choices[0].Message
		if strings.TrimSpace(m.ReasoningContent) != tc.reasoning || m.Content != tc.content {
			t.Errorf("%s: reasoning %q content %q, want %q and %q", tc.prompt, m.ReasoningContent, m.Content, tc.reasoning, tc.content)
		}
	}
}

// TestOpenAIRouteConstraints: SGLang's regex extension on chat, and
// json_schema / response_format on /v1/completions.
func TestOpenAIRouteConstraints(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{EOSAfter: 20}, engine.Config{}, nil)
	b := greedyBody("hi", 60)
	b["regex"] = `(yes|no), [0-9]{2}`
	b["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
	b["temperature"] = 1
	code, body := ts.post(t, "/v1/chat/completions", b)
	var r chatResponse
	if err := json.Unmarshal(body, &r); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	if got := *r.Choices[0].Message.Content; !regexp.MustCompile(`^(yes|no), [0-9]{2}$`).MatchString(got) {
		t.Errorf("chat regex: %q (%s)", got, body)
	}
	for _, extra := range []map[string]any{
		{"json_schema": `{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}`},
		{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "b", "schema": map[string]any{"type": "array", "items": map[string]any{"type": "boolean"}, "minItems": 1, "maxItems": 2}}}},
	} {
		req := map[string]any{"prompt": "x", "max_tokens": 60, "temperature": 1}
		for k, v := range extra {
			req[k] = v
		}
		code, body := ts.post(t, "/v1/completions", req)
		var cr struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(body, &cr); code != 200 || err != nil {
			t.Fatalf("%d %s", code, body)
		}
		var got []bool
		if c := cr.Choices[0]; c.FinishReason == "stop" && (json.Unmarshal([]byte(c.Text), &got) != nil || len(got) < 1 || len(got) > 2) {
			t.Errorf("completions %v: %q", extra, c.Text)
		}
	}
}

// TestThinkFirstPhases walks the wrapper through a think block.
func TestThinkFirstPhases(t *testing.T) {
	tok := fakemodel.Tokenizer{}
	d, err := constraint.CompileRegex(`ab`)
	if err != nil {
		t.Fatal(err)
	}
	v, err := constraint.NewVocab(tok, 300, []int32{fakemodel.IMEnd})
	if err != nil {
		t.Fatal(err)
	}
	c := &thinkFirst{inner: constraint.NewGrammar(d, v).NewConstraint(), tok: tok, open: fakemodel.Think, close: fakemodel.EndThink, eos: []int32{fakemodel.IMEnd}}
	steps := []struct {
		tok     int32
		allowed []int32
		refused []int32
	}{
		{fakemodel.Think, []int32{fakemodel.Think, 'a'}, []int32{'b', fakemodel.IMEnd, ' '}},
		{'z', []int32{'z', fakemodel.EndThink}, []int32{fakemodel.IMEnd}},
		{fakemodel.EndThink, []int32{fakemodel.EndThink}, nil},
		{'\n', []int32{'\n', 'a'}, []int32{'b', fakemodel.IMEnd}},
		{'a', []int32{'a'}, nil},
		{'b', []int32{'b'}, []int32{'\n', fakemodel.Think}},
	}
	for i, st := range steps {
		for _, a := range st.allowed {
			if !c.Allow(a) {
				t.Errorf("step %d: %d refused", i, a)
			}
		}
		for _, r := range st.refused {
			if c.Allow(r) {
				t.Errorf("step %d: %d allowed", i, r)
			}
		}
		c.Advance(st.tok)
	}
	if !c.Allow(fakemodel.IMEnd) || c.Allow('a') {
		t.Error("after the answer only EOS may follow")
	}
}
