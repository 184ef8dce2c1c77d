package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

// agentScript answers the markers the Responses and Messages tests send:
// a tool result first (it follows the question that asked for the tool),
// then a question asking for a tool, a thinking answer and a plain one.
func agentScript() func([]int32) (int32, bool) {
	return scriptedInOrder(
		"RESULT-SUNNY", "It is sunny in Paris.",
		"WEATHER?", "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"THINK", "<think>\nThe user greets.\n</think>\n\nHello there!",
		"PLAIN", "Just an answer.",
	)
}

var weatherSchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}

// responseBody is the part of a response object the tests read.
type responseBody struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	Model             string `json:"model"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Role      string `json:"role"`
		Status    string `json:"status"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Type     string             `json:"type"`
			Text     string             `json:"text"`
			Logprobs []chatTokenLogprob `json:"logprobs"`
		} `json:"content"`
	} `json:"output"`
	Usage struct {
		InputTokens         int `json:"input_tokens"`
		OutputTokens        int `json:"output_tokens"`
		TotalTokens         int `json:"total_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	} `json:"usage"`
}

// summary is "type:text" per output item (function calls as
// name(arguments)).
func (r *responseBody) summary() []string {
	var out []string
	for _, it := range r.Output {
		switch it.Type {
		case "function_call":
			out = append(out, "function_call:"+it.Name+"("+it.Arguments+")")
		default:
			var text strings.Builder
			for _, c := range it.Content {
				text.WriteString(c.Text)
			}
			out = append(out, it.Type+":"+text.String())
		}
	}
	return out
}

func postResponse(t *testing.T, ts *testServer, body map[string]any) *responseBody {
	t.Helper()
	code, data := ts.post(t, "/v1/responses", body)
	var r responseBody
	if err := json.Unmarshal(data, &r); err != nil || code != 200 {
		t.Fatalf("%d %s", code, data)
	}
	return &r
}

func TestResponses(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{Script: agentScript()}, engine.Config{}, nil)
	tools := []any{map[string]any{"type": "function", "name": "get_weather", "description": "Weather of a city", "parameters": weatherSchema}}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		want   []string
		status string
	}{
		{"text input", map[string]any{"model": "my-model", "input": "PLAIN hi", "instructions": "Be brief.", "temperature": 0},
			[]string{"message:Just an answer."}, "completed"},
		{"max_output_tokens", map[string]any{"input": "PLAIN hi", "max_output_tokens": 3, "temperature": 0},
			[]string{"message:Jus"}, "incomplete"},
		{"message list", map[string]any{"input": []any{
			map[string]any{"role": "developer", "content": "Be brief."},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "THINK"}}},
		}, "temperature": 0}, []string{"reasoning:The user greets.\n", "message:Hello there!"}, "completed"},
		{"tool call", map[string]any{"input": "WEATHER? in Paris", "tools": tools, "temperature": 0},
			[]string{"message:Let me check.\n", "function_call:get_weather({\"city\": \"Paris\"})"}, "completed"},
		{"tool output", map[string]any{"input": []any{
			map[string]any{"role": "user", "content": "WEATHER? in Paris"},
			map[string]any{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": `{"city": "Paris"}`},
			map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "RESULT-SUNNY"},
		}, "tools": tools, "temperature": 0}, []string{"message:It is sunny in Paris."}, "completed"},
		{"stop sequence", map[string]any{"input": "PLAIN", "stop": []string{"answer"}, "temperature": 0},
			[]string{"message:Just an "}, "completed"},
	} {
		r := postResponse(t, ts, tc.body)
		if got := r.summary(); strings.Join(got, "|") != strings.Join(tc.want, "|") || r.Status != tc.status {
			t.Errorf("%s: %q %s, want %q %s", tc.name, got, r.Status, tc.want, tc.status)
		}
		if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Usage.InputTokens == 0 ||
			r.Usage.OutputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
			t.Errorf("%s: %+v", tc.name, r)
		}
		for _, it := range r.Output {
			prefix := map[string]string{"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}[it.Type]
			if !strings.HasPrefix(it.ID, prefix) || it.Type == "function_call" && !strings.HasPrefix(it.CallID, "call_") {
				t.Errorf("%s: item ids %q %q", tc.name, it.ID, it.CallID)
			}
		}
		if tc.status == "incomplete" && (r.IncompleteDetails == nil || r.IncompleteDetails.Reason != "max_output_tokens") {
			t.Errorf("%s: incomplete_details %+v", tc.name, r.IncompleteDetails)
		}
	}
	if r := postResponse(t, ts, map[string]any{"model": "my-model", "input": "PLAIN"}); r.Model != "my-model" {
		t.Errorf("model %q, want the request's", r.Model)
	}
	// "<think>", "\n", "The user greets." a token a byte, "\n", "</think>".
	if r := postResponse(t, ts, map[string]any{"input": "THINK", "temperature": 0}); r.Usage.OutputTokensDetails.ReasoningTokens != 20 {
		t.Errorf("reasoning tokens %d, want 20", r.Usage.OutputTokensDetails.ReasoningTokens)
	}
	r := postResponse(t, ts, map[string]any{"input": "PLAIN", "temperature": 0, "include": []string{"message.output_text.logprobs"}, "top_logprobs": 2})
	if lps := r.Output[0].Content[0].Logprobs; len(lps) != r.Usage.OutputTokens || len(lps[0].TopLogprobs) != 2 {
		t.Errorf("logprobs %+v for %d tokens", lps, r.Usage.OutputTokens)
	}
}

func TestResponsesErrors(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	for _, tc := range []struct {
		name  string
		body  string
		param string
		want  string
	}{
		{"no input", `{"model": "m"}`, "input", "expected a string or an array"},
		{"previous response", `{"input": "hi", "previous_response_id": "resp_1"}`, "previous_response_id", "stores no responses"},
		{"hosted tool", `{"input": "hi", "tools": [{"type": "web_search"}]}`, "tools[0].type", `"web_search" tools are not supported`},
		{"image", `{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}`, "input[0].content[0]", "text-only"},
		{"bad item", `{"input": [{"type": "item_reference", "id": "x"}]}`, "input[0]", "item references"},
		{"max_output_tokens", `{"input": "hi", "max_output_tokens": 0}`, "max_output_tokens", "at least 1"},
		{"format", `{"input": "hi", "text": {"format": {"type": "xml"}}}`, "text.format.type", "xml"},
		{"include", `{"input": "hi", "include": ["everything"]}`, "include[0]", "everything"},
		{"top_p", `{"input": "hi", "top_p": 3}`, "top_p", "top_p"},
	} {
		code, body := ts.post(t, "/v1/responses", tc.body)
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || code != 400 || e.Error.Param == nil || *e.Error.Param != tc.param ||
			!strings.Contains(e.Error.Message, tc.want) || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s, want param %s and %q", tc.name, code, body, tc.param, tc.want)
		}
	}
}

// responseEvents streams body and returns its events, checking that each
// carries its own name as type and that sequence numbers count from 0.
func responseEvents(t *testing.T, ts *testServer, body map[string]any) []sseEvent {
	t.Helper()
	body["stream"] = true
	events := postSSE(t, ts.url+"/v1/responses", body)
	for i, e := range events {
		if e.data["type"] != e.name || e.data["sequence_number"] != float64(i) {
			t.Errorf("event %d: name %q, data type %v, sequence_number %v", i, e.name, e.data["type"], e.data["sequence_number"])
		}
	}
	return events
}

func TestResponsesStream(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{Script: agentScript()}, engine.Config{}, nil)
	tools := []any{map[string]any{"type": "function", "name": "get_weather", "parameters": weatherSchema}}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		order []string // event names with runs of deltas collapsed
	}{
		{"reasoning and text", map[string]any{"input": "THINK", "temperature": 0}, []string{
			"response.created", "response.in_progress",
			"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
			"response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
			"response.output_item.added", "response.content_part.added", "response.output_text.delta",
			"response.output_text.done", "response.content_part.done", "response.output_item.done",
			"response.completed"}},
		{"tool call", map[string]any{"input": "WEATHER?", "tools": tools, "temperature": 0}, []string{
			"response.created", "response.in_progress",
			"response.output_item.added", "response.content_part.added", "response.output_text.delta",
			"response.output_text.done", "response.content_part.done", "response.output_item.done",
			"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
			"response.output_item.done", "response.completed"}},
		{"cut", map[string]any{"input": "PLAIN", "max_output_tokens": 4, "temperature": 0}, []string{
			"response.created", "response.in_progress",
			"response.output_item.added", "response.content_part.added", "response.output_text.delta",
			"response.output_text.done", "response.content_part.done", "response.output_item.done",
			"response.incomplete"}},
	} {
		events := responseEvents(t, ts, tc.body)
		var order []string
		texts := map[string]string{} // item id -> streamed text or arguments
		for _, e := range events {
			if len(order) == 0 || order[len(order)-1] != e.name || !strings.HasSuffix(e.name, ".delta") {
				order = append(order, e.name)
			}
			if d, ok := e.data["delta"].(string); ok {
				texts[e.data["item_id"].(string)] += d
			}
		}
		if strings.Join(order, " ") != strings.Join(tc.order, " ") {
			t.Errorf("%s: events\n%v\nwant\n%v", tc.name, order, tc.order)
			continue
		}
		// The last event's response holds what the deltas built, and is
		// what the non-streaming call answers.
		data, _ := json.Marshal(events[len(events)-1].data["response"])
		var final responseBody
		_ = json.Unmarshal(data, &final)
		for _, it := range final.Output {
			got := it.Arguments
			if it.Type != "function_call" {
				got = it.Content[0].Text
			}
			if texts[it.ID] != got {
				t.Errorf("%s: item %s streamed %q, final %q", tc.name, it.ID, texts[it.ID], got)
			}
		}
		delete(tc.body, "stream")
		if want := postResponse(t, ts, tc.body); strings.Join(final.summary(), "|") != strings.Join(want.summary(), "|") || final.Status != want.Status {
			t.Errorf("%s: stream %q %s, answer %q %s", tc.name, final.summary(), final.Status, want.summary(), want.Status)
		}
	}
}

func TestResponsesMessages(t *testing.T) {
	for _, tc := range []struct {
		name, req, want string
	}{
		{"string", `{"instructions": "Be brief.", "input": "hi"}`,
			`[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]`},
		{"parts and roles", `{"input": [{"role": "developer", "content": "D"}, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]}`,
			`[{"role":"developer","content":"D"},{"role":"user","content":"ab"}]`},
		{"calls join the assistant message, reasoning goes with it", `{"input": [
			{"role": "user", "content": "q"},
			{"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
			{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
			{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\": 1}"},
			{"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
			{"type": "function_call_output", "call_id": "c1", "output": "one"},
			{"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}]}`,
			`[{"role":"user","content":"q"},` +
				`{"role":"assistant","content":"Let me check.","reasoning_content":"think","tool_calls":[` +
				`{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}},` +
				`{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},` +
				`{"role":"tool","content":"one","tool_call_id":"c1"},{"role":"tool","content":"two","tool_call_id":"c2"}]`},
		{"a call without a message, reasoning from its summary", `{"input": [
			{"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
			{"type": "function_call", "call_id": "c1", "name": "f"}]}`,
			`[{"role":"assistant","content":"","reasoning_content":"s","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]`},
	} {
		var req responsesRequest
		if err := json.Unmarshal([]byte(tc.req), &req); err != nil {
			t.Fatal(err)
		}
		msgs, err := responsesMessages(&req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := string(jsonArray(msgs)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestStoredResponseRoutes(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	code, body := ts.get(t, "/v1/responses/resp_123")
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || code != 404 || !strings.Contains(e.Error.Message, "resp_123") || e.Error.Param == nil || *e.Error.Param != "response_id" {
		t.Errorf("%d %s", code, body)
	}
	if code, body := ts.post(t, "/v1/responses/resp_123/cancel", `{}`); code != 404 {
		t.Errorf("cancel: %d %s", code, body)
	}
}
