package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

// messageBody is an Anthropic message as the tests read it.
type messageBody struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		Thinking string          `json:"thinking"`
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Input    json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens          int `json:"input_tokens"`
		OutputTokens         int `json:"output_tokens"`
		CacheReadInputTokens int `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

// summary is "type:text" per block (tool_use as name(input)).
func (m *messageBody) summary() []string {
	var out []string
	for _, b := range m.Content {
		switch b.Type {
		case "thinking":
			out = append(out, "thinking:"+b.Thinking)
		case "tool_use":
			out = append(out, "tool_use:"+b.Name+string(b.Input))
		default:
			out = append(out, b.Type+":"+b.Text)
		}
	}
	return out
}

func postMessage(t *testing.T, ts *testServer, body map[string]any) *messageBody {
	t.Helper()
	code, data := ts.post(t, "/v1/messages", body)
	var m messageBody
	if err := json.Unmarshal(data, &m); err != nil || code != 200 {
		t.Fatalf("%d %s", code, data)
	}
	return &m
}

func userMsg(content any) []any { return []any{map[string]any{"role": "user", "content": content}} }

func TestMessages(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{Script: agentScript()}, engine.Config{}, nil)
	tools := []any{map[string]any{"name": "get_weather", "description": "Weather of a city", "input_schema": weatherSchema}}
	for _, tc := range []struct {
		name, reason string
		seq          string
		body         map[string]any
		want         []string
	}{
		{"text", "end_turn", "", map[string]any{"model": "claude-x", "max_tokens": 50, "system": "Be brief.", "messages": userMsg("PLAIN hi"), "temperature": 0},
			[]string{"text:Just an answer."}},
		{"system blocks", "end_turn", "", map[string]any{"model": "m", "max_tokens": 50, "temperature": 0,
			"system": []any{map[string]any{"type": "text", "text": "Be brief."}}, "messages": userMsg([]any{map[string]any{"type": "text", "text": "PLAIN"}})},
			[]string{"text:Just an answer."}},
		{"max_tokens", "max_tokens", "", map[string]any{"model": "m", "max_tokens": 3, "messages": userMsg("PLAIN"), "temperature": 0},
			[]string{"text:Jus"}},
		{"stop_sequences", "stop_sequence", "answer", map[string]any{"model": "m", "max_tokens": 50, "messages": userMsg("PLAIN"),
			"stop_sequences": []string{"answer"}, "temperature": 0}, []string{"text:Just an "}},
		{"thinking", "end_turn", "", map[string]any{"model": "m", "max_tokens": 80, "messages": userMsg("THINK"), "temperature": 0,
			"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024}}, []string{"thinking:The user greets.\n", "text:Hello there!"}},
		{"tool_use", "tool_use", "", map[string]any{"model": "m", "max_tokens": 100, "messages": userMsg("WEATHER? in Paris"), "tools": tools, "temperature": 0},
			[]string{"text:Let me check.\n", `tool_use:get_weather{"city":"Paris"}`}},
		{"prefill", "end_turn", "", map[string]any{"model": "m", "max_tokens": 50, "temperature": 0, "messages": []any{
			map[string]any{"role": "user", "content": "PLAIN"}, map[string]any{"role": "assistant", "content": "Just an"}}},
			[]string{"text: answer."}},
		{"tool_result", "end_turn", "", map[string]any{"model": "m", "max_tokens": 100, "tools": tools, "temperature": 0, "messages": []any{
			map[string]any{"role": "user", "content": "WEATHER? in Paris"},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "text", "text": "Let me check."},
				map[string]any{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": map[string]any{"city": "Paris"}}}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{map[string]any{"type": "text", "text": "RESULT-SUNNY"}}}}},
		}}, []string{"text:It is sunny in Paris."}},
	} {
		m := postMessage(t, ts, tc.body)
		if got := m.summary(); strings.Join(got, "|") != strings.Join(tc.want, "|") || m.StopReason != tc.reason {
			t.Errorf("%s: %q %s, want %q %s", tc.name, got, m.StopReason, tc.want, tc.reason)
		}
		if seq := ""; m.StopSequence != nil && (*m.StopSequence != tc.seq) || m.StopSequence == nil && tc.seq != seq {
			t.Errorf("%s: stop_sequence %v, want %q", tc.name, m.StopSequence, tc.seq)
		}
		if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" || m.Model != tc.body["model"] ||
			m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0 {
			t.Errorf("%s: %+v", tc.name, m)
		}
		for _, b := range m.Content {
			if b.Type == "tool_use" && !strings.HasPrefix(b.ID, "toolu_") {
				t.Errorf("%s: tool_use id %q", tc.name, b.ID)
			}
		}
	}
	// count_tokens counts what a request with the same messages prefills.
	body := map[string]any{"model": "m", "system": "Be brief.", "messages": userMsg("PLAIN hi")}
	code, data := ts.post(t, "/v1/messages/count_tokens", body)
	body["max_tokens"] = 5
	m := postMessage(t, ts, body)
	if want := m.Usage.InputTokens + m.Usage.CacheReadInputTokens; code != 200 || strings.TrimSpace(string(data)) != `{"input_tokens":`+itoa(want)+`}` {
		t.Errorf("count_tokens: %d %s, want %d", code, data, want)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// postKey posts body with the API key in X-API-Key, as the Anthropic
// clients send it.
func (ts *testServer) postKey(t *testing.T, path, body, key string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func TestMessagesErrors(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) { o.APIKey = "k" })
	for _, tc := range []struct {
		name, body, typ, want string
		status                int
	}{
		{"no max_tokens", `{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`, "invalid_request_error", "max_tokens: required", 400},
		{"bad role", `{"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "hi"}]}`, "invalid_request_error", "messages[0].role", 400},
		{"image", `{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}`, "invalid_request_error", "text-only", 400},
		{"server tool", `{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}`, "invalid_request_error", "tools[0].type", 400},
		{"bad JSON", `{"model": `, "invalid_request_error", "invalid JSON", 400},
	} {
		code, data := ts.postKey(t, "/v1/messages", tc.body, "k")
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &e); err != nil || code != tc.status || e.Type != "error" || e.Error.Type != tc.typ || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s: %d %s, want %d %s %q", tc.name, code, data, tc.status, tc.typ, tc.want)
		}
	}
	code, data := ts.postKey(t, "/v1/messages", `{}`, "wrong")
	if code != 401 || !strings.Contains(string(data), `"type":"authentication_error"`) || !strings.HasPrefix(string(data), `{"error"`) {
		t.Errorf("wrong key: %d %s", code, data)
	}
}

func TestMessagesStream(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{Script: agentScript()}, engine.Config{}, nil)
	tools := []any{map[string]any{"name": "get_weather", "input_schema": weatherSchema}}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		order []string
	}{
		{"thinking and text", map[string]any{"model": "m", "max_tokens": 80, "messages": userMsg("THINK"), "temperature": 0}, []string{
			"message_start", "content_block_start", "content_block_delta", "content_block_stop",
			"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}},
		{"tool_use", map[string]any{"model": "m", "max_tokens": 100, "messages": userMsg("WEATHER?"), "tools": tools, "temperature": 0}, []string{
			"message_start", "content_block_start", "content_block_delta", "content_block_stop",
			"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}},
		{"stop sequence", map[string]any{"model": "m", "max_tokens": 80, "messages": userMsg("PLAIN"), "stop_sequences": []string{"answer"}, "temperature": 0}, []string{
			"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}},
	} {
		tc.body["stream"] = true
		events := postSSE(t, ts.url+"/v1/messages", tc.body)
		var order []string
		var built []map[string]any
		var msg map[string]any
		for _, e := range events {
			if e.data["type"] != e.name {
				t.Errorf("%s: event %q has type %v", tc.name, e.name, e.data["type"])
			}
			if len(order) == 0 || order[len(order)-1] != e.name || e.name != "content_block_delta" {
				order = append(order, e.name)
			}
			switch e.name {
			case "message_start":
				msg = e.data["message"].(map[string]any)
			case "content_block_start":
				if int(e.data["index"].(float64)) != len(built) {
					t.Errorf("%s: block index %v, want %d", tc.name, e.data["index"], len(built))
				}
				built = append(built, e.data["content_block"].(map[string]any))
			case "content_block_delta":
				b := built[int(e.data["index"].(float64))]
				d := e.data["delta"].(map[string]any)
				switch d["type"] {
				case "text_delta":
					b["text"] = b["text"].(string) + d["text"].(string)
				case "thinking_delta":
					b["thinking"] = b["thinking"].(string) + d["thinking"].(string)
				case "input_json_delta":
					b["input"] = json.RawMessage(d["partial_json"].(string))
				}
			case "message_delta":
				d := e.data["delta"].(map[string]any)
				msg["stop_reason"], msg["stop_sequence"] = d["stop_reason"], d["stop_sequence"]
				msg["usage"] = e.data["usage"]
			}
		}
		if strings.Join(order, " ") != strings.Join(tc.order, " ") {
			t.Errorf("%s: events %v, want %v", tc.name, order, tc.order)
			continue
		}
		msg["content"] = built
		data, _ := json.Marshal(msg)
		var got messageBody
		_ = json.Unmarshal(data, &got)
		delete(tc.body, "stream")
		want := postMessage(t, ts, tc.body)
		if strings.Join(got.summary(), "|") != strings.Join(want.summary(), "|") || got.StopReason != want.StopReason ||
			(got.StopSequence == nil) != (want.StopSequence == nil) || got.Usage.OutputTokens != want.Usage.OutputTokens {
			t.Errorf("%s: stream %q %s %+v, answer %q %s %+v", tc.name, got.summary(), got.StopReason, got.Usage, want.summary(), want.StopReason, want.Usage)
		}
	}
}

func TestReplaceName(t *testing.T) {
	for _, tc := range []struct{ in, name, to, want string }{
		{"at most 16 stop strings", "stop", "stop_sequences", "at most 16 stop_sequences strings"},
		{"stop_token_ids and stops", "stop", "stop_sequences", "stop_token_ids and stops"},
		{"messages[2].content: missing", "messages", "input", "input[2].content: missing"},
		{"response_format.json_schema.name: required", "response_format.json_schema", "text.format", "text.format.name: required"},
		{"max_tokens must be at least 1; max_tokens", "max_tokens", "max_output_tokens", "max_output_tokens must be at least 1; max_output_tokens"},
	} {
		if got := replaceName(tc.in, tc.name, tc.to); got != tc.want {
			t.Errorf("replaceName(%q, %q): %q, want %q", tc.in, tc.name, got, tc.want)
		}
	}
}

func TestMessagesChat(t *testing.T) {
	for _, tc := range []struct {
		name, req, want string
	}{
		{"system blocks and strings", `{"system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}], "messages": [{"role": "user", "content": "hi"}]}`,
			`[{"role":"system","content":"A\nB"},{"role":"user","content":"hi"}]`},
		{"tool round trip", `{"messages": [
			{"role": "user", "content": [{"type": "text", "text": "q"}]},
			{"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "x"}, {"type": "redacted_thinking", "data": "y"},
				{"type": "text", "text": "Let me check."}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"b": 2, "a": 1}}]},
			{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}]},
				{"type": "text", "text": "thanks"}]}]}`,
			`[{"role":"user","content":"q"},` +
				`{"role":"assistant","content":"Let me check.","reasoning_content":"hmm","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"f","arguments":{"b": 2, "a": 1}}}]},` +
				`{"role":"tool","content":"r1\nr2","tool_call_id":"toolu_1"},{"role":"user","content":"thanks"}]`},
		{"several text blocks", `{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}`,
			`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`},
	} {
		var req messagesRequest
		if err := json.Unmarshal([]byte(tc.req), &req); err != nil {
			t.Fatal(err)
		}
		msgs, err := messagesChat(&req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := string(jsonArray(msgs)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
