package server

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/internal/fakemodel"
)

// genOutput is one /generate answer object.
type genOutput struct {
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	Meta      struct {
		FinishReason     map[string]any `json:"finish_reason"`
		PromptTokens     int            `json:"prompt_tokens"`
		CompletionTokens int            `json:"completion_tokens"`
		OutputLogprobs   []triple       `json:"output_token_logprobs"`
		OutputTop        [][]triple     `json:"output_top_logprobs"`
		OutputIDsLP      [][]triple     `json:"output_token_ids_logprobs"`
		InputLogprobs    []triple       `json:"input_token_logprobs"`
		InputTop         [][]triple     `json:"input_top_logprobs"`
		InputIDsLP       [][]triple     `json:"input_token_ids_logprobs"`
	} `json:"meta_info"`
}

// triple is SGLang's [logprob, token id, text] (logprob and text may be
// null).
type triple struct {
	LP   *float64
	ID   int32
	Text *string
}

func (x *triple) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) != 3 {
		return &json.UnmarshalTypeError{Value: string(b)}
	}
	if err := json.Unmarshal(raw[0], &x.LP); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[1], &x.ID); err != nil {
		return err
	}
	return json.Unmarshal(raw[2], &x.Text)
}

func (ts *testServer) generate(t *testing.T, body map[string]any) genOutput {
	t.Helper()
	code, data := ts.post(t, "/generate", body)
	if code != 200 {
		t.Fatalf("/generate %v: %d %s", body, code, data)
	}
	var g genOutput
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("/generate: %v: %s", err, data)
	}
	return g
}

// refLP is log_softmax of the fake model's logits after toks.
func (ts *testServer) refLP(toks []int32) []float64 {
	row := make([]float32, 300)
	ts.runner.Logits(toks, row)
	return sample.LogSoftmax(row, nil)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-4 }

func maxValue(m map[string]float64) float64 {
	best := math.Inf(-1)
	for _, v := range m {
		best = max(best, v)
	}
	return best
}

// TestGenerateTokenLogprobs: SGLang's logprob fields of /generate, checked
// against the model's own log-softmax at every prompt and output position.
func TestGenerateTokenLogprobs(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	prompt := fakemodel.Tokenizer{}.Encode("Score me, please")
	ids := []int32{65, 66, 0}
	for _, start := range []int{0, 5} {
		g := ts.generate(t, map[string]any{"input_ids": prompt, "return_logprob": true, "logprob_start_len": start, "top_logprobs_num": 2,
			"token_ids_logprob": ids, "return_text_in_logprobs": true, "sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0}})
		m := &g.Meta
		if len(g.OutputIDs) != 4 || len(m.OutputIDsLP) != 4 || len(m.InputLogprobs) != len(prompt)-start ||
			len(m.InputTop) != len(prompt)-start || len(m.InputIDsLP) != len(prompt)-start {
			t.Fatalf("start %d: shapes %+v", start, m)
		}
		for k, j := 0, start; j < len(prompt); k, j = k+1, j+1 {
			lp, top, idl := m.InputLogprobs[k], m.InputTop[k], m.InputIDsLP[k]
			if lp.ID != prompt[j] || lp.Text == nil || *lp.Text != string(rune(prompt[j])) {
				t.Errorf("start %d position %d: %+v", start, j, lp)
			}
			if j == 0 {
				if lp.LP != nil || top != nil || idl != nil {
					t.Errorf("position 0 has logprobs: %+v %v %v", lp, top, idl)
				}
				continue
			}
			ref := ts.refLP(prompt[:j])
			if lp.LP == nil || !near(*lp.LP, ref[prompt[j]]) {
				t.Errorf("start %d position %d: logprob %v, want %v", start, j, lp.LP, ref[prompt[j]])
			}
			if best := slices.Index(ref, slices.Max(ref)); len(top) != 2 || top[0].ID != int32(best) || !near(*top[0].LP, ref[best]) || *top[1].LP > *top[0].LP {
				t.Errorf("start %d position %d: top %+v, best %d", start, j, top, best)
			}
			for q, x := range idl {
				if x.ID != ids[q] || !near(*x.LP, ref[ids[q]]) {
					t.Errorf("start %d position %d: id logprob %+v, want %v", start, j, x, ref[ids[q]])
				}
			}
		}
		all := slices.Clone(prompt)
		for k, id := range g.OutputIDs {
			ref := ts.refLP(all)
			if lp := m.OutputLogprobs[k]; lp.ID != id || !near(*lp.LP, ref[id]) {
				t.Errorf("output %d: %+v, want %v", k, lp, ref[id])
			}
			for q, x := range m.OutputIDsLP[k] {
				if x.ID != ids[q] || !near(*x.LP, ref[ids[q]]) {
					t.Errorf("output %d: id logprob %+v, want %v", k, x, ref[ids[q]])
				}
			}
			all = append(all, id)
		}
	}
	// One token_ids_logprob list per prompt of a batch.
	code, data := ts.post(t, "/generate", map[string]any{"text": []string{"ab", "cd"}, "return_logprob": true, "token_ids_logprob": [][]int32{{65}, {66, 67}},
		"sampling_params": map[string]any{"max_new_tokens": 2}})
	var outs []genOutput
	if code != 200 || json.Unmarshal(data, &outs) != nil || len(outs) != 2 {
		t.Fatalf("batch: %d %s", code, data)
	}
	for i, want := range [][]int32{{65}, {66, 67}} {
		for _, pos := range outs[i].Meta.OutputIDsLP {
			if len(pos) != len(want) || pos[0].ID != want[0] {
				t.Errorf("batch prompt %d: %+v, want ids %v", i, pos, want)
			}
		}
		if outs[i].Meta.InputIDsLP != nil {
			t.Errorf("batch prompt %d: input ids logprobs without logprob_start_len", i)
		}
	}
}

// TestPromptScoring: max_new_tokens 0 / max_tokens 0 score the prompt
// only, and echo with logprobs gives the prompt's logprobs first, equal
// to /generate's input_token_logprobs (lm-eval's loglikelihood requests).
func TestPromptScoring(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	text := "The quick brown fox"
	prompt := fakemodel.Tokenizer{}.Encode(text)
	g := ts.generate(t, map[string]any{"text": text, "return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": 1, "sampling_params": map[string]any{"max_new_tokens": 0}})
	if len(g.OutputIDs) != 0 || g.Text != "" || g.Meta.CompletionTokens != 0 || g.Meta.FinishReason["type"] != "length" || g.Meta.FinishReason["length"] != 0.0 ||
		len(g.Meta.InputLogprobs) != len(prompt) {
		t.Fatalf("max_new_tokens 0: %+v", g)
	}
	for _, maxTokens := range []int{0, 1, 3} {
		code, data := ts.post(t, "/v1/completions", map[string]any{"model": modelName, "prompt": text, "echo": true, "logprobs": 2, "max_tokens": maxTokens, "temperature": 0})
		var r completionResponse
		if code != 200 || json.Unmarshal(data, &r) != nil || len(r.Choices) != 1 {
			t.Fatalf("max_tokens %d: %d %s", maxTokens, code, data)
		}
		c := r.Choices[0]
		lp := c.Logprobs
		n := len(prompt) + maxTokens
		if !strings.HasPrefix(c.Text, text) || len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n ||
			r.Usage.CompletionTokens != maxTokens || r.Usage.PromptTokens != len(prompt) || *c.FinishReason != "length" {
			t.Fatalf("max_tokens %d: %s", maxTokens, data)
		}
		if maxTokens == 0 && c.Text != text {
			t.Errorf("max_tokens 0: text %q", c.Text)
		}
		if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
			t.Errorf("max_tokens %d: the first prompt token has logprobs: %v %v", maxTokens, lp.TokenLogprobs[0], lp.TopLogprobs[0])
		}
		for j := 1; j < len(prompt); j++ {
			if lp.Tokens[j] != text[j:j+1] || lp.TextOffset[j] != j || !near(*lp.TokenLogprobs[j], *g.Meta.InputLogprobs[j].LP) {
				t.Errorf("max_tokens %d position %d: %q at %d logprob %v, /generate says %v", maxTokens, j, lp.Tokens[j], lp.TextOffset[j], *lp.TokenLogprobs[j], *g.Meta.InputLogprobs[j].LP)
			}
			// Tokens of the same text share an entry, the likelier kept.
			best := g.Meta.InputTop[j][0]
			if top := lp.TopLogprobs[j]; len(top) == 0 || len(top) > 2 || !near(maxValue(top), *best.LP) {
				t.Errorf("max_tokens %d position %d: top %v, best %+v", maxTokens, j, lp.TopLogprobs[j], best)
			}
		}
		for k := len(prompt); k < n; k++ {
			if lp.TokenLogprobs[k] == nil || len(lp.TopLogprobs[k]) == 0 || len(lp.TopLogprobs[k]) > 2 || lp.TextOffset[k] < lp.TextOffset[k-1] || k == len(prompt) && lp.TextOffset[k] != len(text) {
				t.Errorf("max_tokens %d output %d: %v %v at %d", maxTokens, k, lp.TokenLogprobs[k], lp.TopLogprobs[k], lp.TextOffset[k])
			}
		}
	}
	for _, tc := range []struct {
		path string
		body map[string]any
		want string
	}{
		{"/v1/completions", map[string]any{"prompt": text, "max_tokens": -1}, "max_tokens must be at least 1"},
		{"/generate", map[string]any{"text": text, "sampling_params": map[string]any{"max_new_tokens": -1}}, "must not be negative"},
		{"/v1/chat/completions", greedyBody("hi", 0), "max_tokens must be at least 1"},
	} {
		if code, data := ts.post(t, tc.path, tc.body); code != 400 || !strings.Contains(string(data), tc.want) {
			t.Errorf("%s %v: %d %s", tc.path, tc.body, code, data)
		}
	}
}

// TestLogitBias: +100 forces a token, -100 bans one, on every route.
func TestLogitBias(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	base := ts.generate(t, map[string]any{"text": "bias", "sampling_params": map[string]any{"max_new_tokens": 3, "temperature": 0}})
	banned := base.OutputIDs[0]
	for _, tc := range []struct {
		name     string
		bias     map[string]any
		want     string // the output text, when forced
		notFirst int32  // a banned first token, else -1
	}{
		{"force", map[string]any{"65": 100}, "AAA", -1},
		{"force with spaces in key", map[string]any{" 66": 100.0}, "BBB", -1},
		{"ban", map[string]any{strconv.Itoa(int(banned)): -100}, "", banned},
	} {
		for _, temp := range []float64{0, 1} {
			g := ts.generate(t, map[string]any{"text": "bias", "sampling_params": map[string]any{"max_new_tokens": 3, "temperature": temp, "sampling_seed": 3, "logit_bias": tc.bias}})
			c := chatText(t, ts, map[string]any{"max_tokens": 3, "temperature": temp, "seed": 3, "logit_bias": tc.bias})
			code, data := ts.post(t, "/v1/completions", map[string]any{"prompt": "bias", "max_tokens": 3, "temperature": temp, "seed": 3, "logit_bias": tc.bias})
			var r completionResponse
			if code != 200 || json.Unmarshal(data, &r) != nil {
				t.Fatalf("%s: completions %d %s", tc.name, code, data)
			}
			if tc.want != "" && (g.Text != tc.want || c != tc.want || r.Choices[0].Text != tc.want) {
				t.Errorf("%s temperature %v: /generate %q, chat %q, completions %q, want %q", tc.name, temp, g.Text, c, r.Choices[0].Text, tc.want)
			}
			if tc.notFirst >= 0 && g.OutputIDs[0] == tc.notFirst {
				t.Errorf("%s temperature %v: banned token %d came first", tc.name, temp, tc.notFirst)
			}
		}
	}
	for _, tc := range []struct {
		path  string
		body  map[string]any
		param string
	}{
		{"/v1/completions", map[string]any{"prompt": "a", "logit_bias": map[string]any{"abc": 1}}, "logit_bias"},
		{"/v1/completions", map[string]any{"prompt": "a", "logit_bias": map[string]any{"5": 101}}, "logit_bias"},
		{"/v1/completions", map[string]any{"prompt": "a", "logit_bias": map[string]any{"300": 1}}, "logit_bias"},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "a"}}, "logit_bias": []int{1}}, "logit_bias"},
		{"/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"logit_bias": map[string]any{"-1": 1}}}, "sampling_params.logit_bias"},
		{"/generate", map[string]any{"text": "a", "token_ids_logprob": []int{1, 300}, "return_logprob": true}, "token_ids_logprob"},
		{"/generate", map[string]any{"text": []string{"a", "b"}, "token_ids_logprob": [][]int{{1}}}, "token_ids_logprob"},
	} {
		expectParam(t, ts, tc.path, tc.body, tc.param, "")
	}
}

// chatText runs a one-choice chat request (the user says "bias") and
// returns its content.
func chatText(t *testing.T, ts *testServer, extra map[string]any) string {
	t.Helper()
	b := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "bias"}}}
	for k, v := range extra {
		b[k] = v
	}
	code, data := ts.post(t, "/v1/chat/completions", b)
	var r chatResponse
	if code != 200 || json.Unmarshal(data, &r) != nil || len(r.Choices) != 1 {
		t.Fatalf("chat %v: %d %s", extra, code, data)
	}
	if r.Choices[0].Message.Content == nil {
		return ""
	}
	return *r.Choices[0].Message.Content
}

// expectParam posts body and wants a 400 naming param (and saying want).
func expectParam(t *testing.T, ts *testServer, path string, body map[string]any, param, want string) {
	t.Helper()
	code, data := ts.post(t, path, body)
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &e)
	if code != 400 || e.Error.Param == nil || *e.Error.Param != param || !strings.Contains(e.Error.Message, want) {
		t.Errorf("%s %v: %d %s, want 400 naming %s and saying %q", path, body, code, data, param, want)
	}
}

// TestSamplingParamsRefused: unknown sampling_params keys, custom logit
// processors and what kt does not apply get a 400 naming the field.
func TestSamplingParamsRefused(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	msgs := []any{map[string]any{"role": "user", "content": "a"}}
	for _, tc := range []struct {
		name, path  string
		body        map[string]any
		param, want string
	}{
		{"unknown key", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"temprature": 0}}, "sampling_params.temprature", "unknown sampling_params key"},
		{"unknown key of the second prompt", "/generate", map[string]any{"text": []string{"a", "b"}, "sampling_params": []any{map[string]any{"top_k": 2}, map[string]any{"max_tokens": 2}}}, "sampling_params.max_tokens", "unknown"},
		{"internal key", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"stop_strs": []string{"x"}}}, "sampling_params.stop_strs", "unknown"},
		{"custom_logit_processor", "/generate", map[string]any{"text": "a", "custom_logit_processor": "gAS..."}, "custom_logit_processor", "Python"},
		{"custom_params", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"custom_params": map[string]any{"k": 1}}}, "sampling_params.custom_params", "Python"},
		{"chat custom_logit_processor", "/v1/chat/completions", map[string]any{"messages": msgs, "custom_logit_processor": "x"}, "custom_logit_processor", "Python"},
		{"completions custom_params", "/v1/completions", map[string]any{"prompt": "a", "custom_params": map[string]any{}}, "custom_params", "Python"},
		{"stream_interval", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"stream_interval": 4}}, "sampling_params.stream_interval", "stream_interval"},
		{"bad stop_regex", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"stop_regex": "a(b"}}, "sampling_params.stop_regex", "not a valid regular expression"},
		{"lookahead stop_regex", "/v1/chat/completions", map[string]any{"messages": msgs, "stop_regex": []string{"ok", "a(?=b)"}}, "stop_regex", "stop_regex[1]"},
		{"stop_regex wrong type", "/v1/completions", map[string]any{"prompt": "a", "stop_regex": 5}, "stop_regex", "expected a string"},
	} {
		expectParam(t, ts, tc.path, tc.body, tc.param, tc.want)
	}
	// What SGLang accepts and kt applies (or, for byte-level BPE, what
	// changes nothing) is accepted.
	for _, sp := range []map[string]any{
		{"stream_interval": 1, "spaces_between_special_tokens": false, "custom_params": nil, "structural_tag": nil, "max_new_tokens": 2},
		{"logit_bias": map[string]any{}, "stop_regex": nil, "max_new_tokens": 2},
	} {
		if code, data := ts.post(t, "/generate", map[string]any{"text": "a", "sampling_params": sp}); code != 200 {
			t.Errorf("%v: %d %s", sp, code, data)
		}
	}
}

// TestScoringResponseBound: prompt logprobs, their top alternatives and
// token_ids_logprob count toward --max-response-bytes; a prompt-only
// request counts no output tokens.
func TestScoringResponseBound(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, withLimits(Limits{MaxResponseBytes: 64 << 10}))
	prompt := make([]int32, 100)
	for i := range prompt {
		prompt[i] = int32(i)
	}
	ids := make([]int32, 50)
	for i := range ids {
		ids[i] = int32(i)
	}
	score := map[string]any{"input_ids": prompt, "return_logprob": true, "logprob_start_len": 0, "sampling_params": map[string]any{"max_new_tokens": 0}}
	g := ts.generate(t, score) // 100 prompt entries of 64 bytes: within 64 KiB
	if len(g.Meta.InputLogprobs) != len(prompt) {
		t.Fatalf("%d input logprobs", len(g.Meta.InputLogprobs))
	}
	score["top_logprobs_num"] = 20
	score["token_ids_logprob"] = ids // 100 x (1 + 20 + 50) x 64 bytes
	expectParam(t, ts, "/generate", score, "sampling_params.max_new_tokens", "--max-response-bytes")
}
