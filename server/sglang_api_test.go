package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
	"github.com/ktserve/kt/serveconfig"
)

// sseEvent is one server-sent event: its name (event:, "" if none) and
// data.
type sseEvent struct {
	name string
	data map[string]any
}

// postSSE posts body and reads the event stream; a status other than 200
// fails the test.
func postSSE(t *testing.T, url string, body any) []sseEvent {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b.String())
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != nil {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			payload := strings.TrimPrefix(line, "data: ")
			if payload == "[DONE]" {
				out = append(out, sseEvent{name: "[DONE]", data: map[string]any{}})
				continue
			}
			var one map[string]any
			if err := json.Unmarshal([]byte(payload), &one); err != nil {
				t.Fatalf("event data %q: %v", payload, err)
			}
			cur.data = one
		default:
			t.Fatalf("bad SSE line %q", line)
		}
	}
	return out
}

// scriptedInOrder is scripted with the markers tried in order: the first
// marker the prompt holds picks the answer.
func scriptedInOrder(pairs ...string) func([]int32) (int32, bool) {
	var scripts []func([]int32) (int32, bool)
	tok := fakemodel.Tokenizer{}
	var markers [][]int32
	for i := 0; i+1 < len(pairs); i += 2 {
		scripts = append(scripts, scripted(map[string]string{pairs[i]: pairs[i+1]}))
		markers = append(markers, tok.Encode(pairs[i]))
	}
	asst := tok.Encode("<|im_start|>assistant\n")
	return func(tokens []int32) (int32, bool) {
		end := len(tokens)
		for i := len(tokens) - len(asst); i >= 0; i-- {
			if slices.Equal(tokens[i:i+len(asst)], asst) {
				end = i
				break
			}
		}
		for k, m := range markers {
			if containsSeq(tokens[:end], m) {
				return scripts[k](tokens)
			}
		}
		return 0, false
	}
}

func TestErrorBodyAndModelNames(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	// SGLang checks no model name: any base name is the served model.
	b := greedyBody("hi", 3)
	b["model"] = "gpt-4o"
	// Responses name the request's model, as SGLang's do.
	if code, body := ts.post(t, "/v1/chat/completions", b); code != 200 || !strings.Contains(string(body), `"model":"gpt-4o"`) {
		t.Errorf("any model name: %d %s", code, body)
	}
	cb := map[string]any{"model": "text-model", "prompt": "hi", "max_tokens": 2}
	if code, body := ts.post(t, "/v1/completions", cb); code != 200 || !strings.Contains(string(body), `"model":"text-model"`) {
		t.Errorf("completions model: %d %s", code, body)
	}
	delete(cb, "model")
	if code, body := ts.post(t, "/v1/completions", cb); code != 200 || !strings.Contains(string(body), `"model":"kt-test"`) {
		t.Errorf("completions without a model: %d %s", code, body)
	}
	// An error body is SGLang's ErrorResponse with OpenAI's error beside it.
	code, body := ts.post(t, "/v1/chat/completions", greedyBody("hi", -1))
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil || code != 400 {
		t.Fatalf("%d %s", code, body)
	}
	nested, _ := e["error"].(map[string]any)
	for k, want := range map[string]any{"object": "error", "type": "BadRequestError", "param": "max_tokens", "code": 400.0} {
		if e[k] != want {
			t.Errorf("%s = %v, want %v (%s)", k, e[k], want, body)
		}
	}
	if msg, _ := e["message"].(string); !strings.Contains(msg, "max_tokens must be at least 1") || nested["message"] != msg ||
		nested["type"] != "invalid_request_error" || nested["param"] != "max_tokens" || nested["code"] != 400.0 {
		t.Errorf("body %s", body)
	}
}

func TestTokenizeRoutes(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/tokenize", `{"model": "kt-test", "prompt": "hi"}`, `{"count":2,"max_model_len":4096,"tokens":[104,105]}`},
		{"/v1/tokenize", `{"model": "kt-test", "prompt": ""}`, `{"count":0,"max_model_len":4096,"tokens":[]}`},
		{"/tokenize", `{"prompt": ""}`, `{"count":0,"max_model_len":4096,"tokens":[]}`},
		{"/v1/tokenize", `{"prompt": ["a", ""], "add_special_tokens": false}`, `{"count":[1,0],"max_model_len":4096,"tokens":[[97],[]]}`},
		{"/v1/detokenize", `{"tokens": [104, 105, 258]}`, `{"text":"hi"}`},
		{"/v1/detokenize", `{"tokens": [104, 105, 258], "skip_special_tokens": false}`, `{"text":"hi\u003c|im_end|\u003e"}`},
		{"/detokenize", `{"tokens": []}`, `{"text":""}`},
		{"/v1/detokenize", `{"tokens": [[104], [105]]}`, `{"text":["h","i"]}`},
	} {
		code, body := ts.post(t, tc.path, tc.body)
		if code != 200 || strings.TrimSpace(string(body)) != tc.want {
			t.Errorf("%s %s: %d %s, want %s", tc.path, tc.body, code, body, tc.want)
		}
	}
}

func TestMemoryPoolAndServerInfo(t *testing.T) {
	cfg, err := serveconfig.Parse([]string{"--model-path", "/models/fake", "--tp-size", "1", "--stream-output"})
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) {
		o.ServerArgs = cfg.ServerArgs()
		o.PageSize = 16
		o.StreamOutput = cfg.StreamOutput
	})
	code, body := ts.get(t, "/get_memory_pool_size")
	if code != 200 || strings.TrimSpace(string(body)) != "16384" {
		t.Errorf("/get_memory_pool_size: %d %s", code, body)
	}
	for _, path := range []string{"/server_info", "/get_server_info"} {
		code, body := ts.get(t, path)
		var info map[string]any
		if err := json.Unmarshal(body, &info); err != nil || code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		for k, want := range map[string]any{"model_path": "/models/fake", "tokenizer_path": "/models/fake", "tp_size": 1.0,
			"page_size": 16.0, "max_total_num_tokens": 16384.0, "max_req_input_len": 4095.0, "context_length": 4096.0,
			"stream_output": true, "served_model_name": "/models/fake", "chunked_prefill_size": 4096.0} {
			if info[k] != want {
				t.Errorf("%s: %s = %v, want %v", path, k, info[k], want)
			}
		}
		for k := range info {
			if k != strings.ToLower(k) || strings.Contains(k, "-") {
				t.Errorf("%s: key %q is not snake_case", path, k)
			}
		}
	}
}

// generateOut is one /generate output object (or stream event).
type generateOut struct {
	Index     *int    `json:"index"`
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	Meta      struct {
		ID               string  `json:"id"`
		CompletionTokens int     `json:"completion_tokens"`
		FinishReason     any     `json:"finish_reason"`
		OutputLogprobs   [][]any `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

func generateEvents(t *testing.T, ts *testServer, body map[string]any) []generateOut {
	t.Helper()
	body["stream"] = true
	var outs []generateOut
	events := postSSE(t, ts.url+"/generate", body)
	if len(events) == 0 || events[len(events)-1].name != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %v", events)
	}
	for _, e := range events[:len(events)-1] {
		data, _ := json.Marshal(e.data)
		var g generateOut
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, g)
	}
	return outs
}

func TestGenerateStreamBatchAndN(t *testing.T) {
	for _, incremental := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream_output=%v", incremental), func(t *testing.T) {
			ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) { o.StreamOutput = incremental })
			for _, tc := range []struct {
				name  string
				body  map[string]any
				items int
			}{
				{"batch", map[string]any{"text": []string{"Once", "upon a"}, "return_logprob": true,
					"sampling_params": map[string]any{"max_new_tokens": 6, "temperature": 0}}, 2},
				{"n", map[string]any{"text": "Once", "return_logprob": true,
					"sampling_params": map[string]any{"max_new_tokens": 5, "temperature": 1, "n": 3, "sampling_seed": 11}}, 3},
				{"batch and n", map[string]any{"input_ids": [][]int32{{1, 2}, {3}}, "return_logprob": true,
					"sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 1, "n": 2, "sampling_seed": 3}}, 4},
			} {
				code, body := ts.post(t, "/generate", tc.body)
				var want []generateOut
				if err := json.Unmarshal(body, &want); err != nil || code != 200 || len(want) != tc.items {
					t.Fatalf("%s: %d %s", tc.name, code, body)
				}
				text := make([]string, tc.items)
				ids := make([][]int32, tc.items)
				lps := make([]int, tc.items)
				finished := make([]bool, tc.items)
				for _, g := range generateEvents(t, ts, tc.body) {
					if g.Index == nil || *g.Index < 0 || *g.Index >= tc.items {
						t.Fatalf("%s: event without a valid index: %+v", tc.name, g)
					}
					i := *g.Index
					if finished[i] {
						t.Errorf("%s: item %d has an event after its finish", tc.name, i)
					}
					if incremental {
						text[i] += g.Text
						ids[i] = append(ids[i], g.OutputIDs...)
						lps[i] += len(g.Meta.OutputLogprobs)
						if len(g.Meta.OutputLogprobs) != len(g.OutputIDs) {
							t.Errorf("%s: item %d: %d logprobs for %d new ids", tc.name, i, len(g.Meta.OutputLogprobs), len(g.OutputIDs))
						}
					} else {
						if !strings.HasPrefix(g.Text, text[i]) || len(g.OutputIDs) < len(ids[i]) {
							t.Errorf("%s: item %d: output not cumulative: %q after %q", tc.name, i, g.Text, text[i])
						}
						text[i], ids[i], lps[i] = g.Text, g.OutputIDs, len(g.Meta.OutputLogprobs)
					}
					if g.Meta.CompletionTokens != len(ids[i]) {
						t.Errorf("%s: item %d: completion_tokens %d, %d ids so far", tc.name, i, g.Meta.CompletionTokens, len(ids[i]))
					}
					finished[i] = g.Meta.FinishReason != nil
				}
				for i, w := range want {
					if !finished[i] || text[i] != w.Text || !slices.Equal(ids[i], w.OutputIDs) || lps[i] != len(w.OutputIDs) {
						t.Errorf("%s: item %d streamed %q %v (%d logprobs, finished %v), answered %q %v",
							tc.name, i, text[i], ids[i], lps[i], finished[i], w.Text, w.OutputIDs)
					}
				}
			}
			// One prompt, n = 1: the events carry no index.
			for _, g := range generateEvents(t, ts, map[string]any{"text": "Once", "sampling_params": map[string]any{"max_new_tokens": 3}}) {
				if g.Index != nil {
					t.Errorf("single request event with index %d", *g.Index)
				}
			}
		})
	}
}

// splitAnswer has characters of 2, 3 and 4 bytes: the byte tokenizer
// splits each over several tokens.
const splitAnswer = "héllo wörld ✓ 🙂!"

func TestStreamsHoldPartialCharacters(t *testing.T) {
	// A step delay makes the tokens reach the handler one by one, so that
	// a character's first bytes come without text.
	ts := newTestServer(t, fakemodel.Config{Script: scripted(map[string]string{"SPLIT": splitAnswer}), StepDelay: time.Millisecond}, engine.Config{}, nil)
	answerTokens := len(splitAnswer) + 1 // one token a byte, then <|im_end|>

	b := greedyBody("SPLIT it", 100)
	b["logprobs"] = true
	b["stream"] = true
	b["stream_options"] = map[string]any{"include_usage": true}
	var text strings.Builder
	logprobs := 0
	for _, e := range postSSE(t, ts.url+"/v1/chat/completions", b) {
		choices, _ := e.data["choices"].([]any)
		if len(choices) == 0 {
			continue
		}
		c := choices[0].(map[string]any)
		d := c["delta"].(map[string]any)
		if lp, ok := c["logprobs"].(map[string]any); ok {
			logprobs += len(lp["content"].([]any))
		}
		s, _ := d["content"].(string)
		switch {
		case d["role"] != nil || c["finish_reason"] != nil:
		case s == "":
			t.Errorf("chunk with an empty delta: %v", e.data)
		case strings.ContainsRune(s, '\uFFFD'):
			t.Errorf("chunk with a broken character: %q", s)
		}
		text.WriteString(s)
	}
	if text.String() != splitAnswer || logprobs != answerTokens {
		t.Errorf("chat stream %q with %d logprobs, want %q and %d", text.String(), logprobs, splitAnswer, answerTokens)
	}

	cb := map[string]any{"model": modelName, "prompt": "SPLIT<|im_start|>assistant\n", "max_tokens": 100, "temperature": 0,
		"logprobs": 1, "stream": true}
	text.Reset()
	logprobs = 0
	lastOffset := -1
	for _, e := range postSSE(t, ts.url+"/v1/completions", cb) {
		choices, _ := e.data["choices"].([]any)
		if len(choices) == 0 {
			continue
		}
		c := choices[0].(map[string]any)
		s, _ := c["text"].(string)
		if lp, ok := c["logprobs"].(map[string]any); ok {
			offs := lp["text_offset"].([]any)
			logprobs += len(offs)
			for _, o := range offs {
				if int(o.(float64)) <= lastOffset {
					t.Errorf("text_offset %v after %d", o, lastOffset)
				}
				lastOffset = int(o.(float64))
			}
		} else if c["finish_reason"] == nil {
			t.Errorf("chunk without logprobs: %v", c)
		}
		if c["finish_reason"] == nil && (s == "" || strings.ContainsRune(s, '\uFFFD')) {
			t.Errorf("completion chunk %q", s)
		}
		text.WriteString(s)
	}
	if text.String() != splitAnswer || logprobs != answerTokens {
		t.Errorf("completion stream %q with %d logprobs, want %q and %d", text.String(), logprobs, splitAnswer, answerTokens)
	}
}
