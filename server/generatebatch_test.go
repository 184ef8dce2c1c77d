package server

import (
	"encoding/json"
	"testing"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

// TestGeneratePerPromptLogprobs: /generate takes return_logprob,
// logprob_start_len, top_logprobs_num and token_ids_logprob as one value
// for every prompt or as a list of one per prompt, as SGLang does; each
// prompt's answer carries what its own values ask for.
func TestGeneratePerPromptLogprobs(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	texts := []string{"ab", "cde", "f"}
	type want struct {
		logprob bool
		start   int // -1: no prompt logprobs
		top     int
		ids     []int32 // token_ids_logprob
	}
	for _, tc := range []struct {
		name   string
		fields map[string]any
		want   []want // per prompt
	}{
		{"one value for every prompt", map[string]any{"return_logprob": true, "logprob_start_len": 1, "top_logprobs_num": 2, "token_ids_logprob": []int{65}},
			[]want{{true, 1, 2, []int32{65}}, {true, 1, 2, []int32{65}}, {true, 1, 2, []int32{65}}}},
		{"one per prompt", map[string]any{"return_logprob": []bool{true, false, true}, "logprob_start_len": []any{0, 1, nil}, "top_logprobs_num": []int{1, 3, 0},
			"token_ids_logprob": []any{[]int{65}, nil, []int{66, 67}}},
			[]want{{true, 0, 1, []int32{65}}, {false, -1, 0, nil}, {true, -1, 0, []int32{66, 67}}}},
		{"a token id for every prompt", map[string]any{"return_logprob": true, "token_ids_logprob": 70},
			[]want{{true, -1, 0, []int32{70}}, {true, -1, 0, []int32{70}}, {true, -1, 0, []int32{70}}}},
		{"empty lists are none", map[string]any{"return_logprob": true, "token_ids_logprob": []any{[]int{}, []int{65}, []int{}}},
			[]want{{true, -1, 0, nil}, {true, -1, 0, []int32{65}}, {true, -1, 0, nil}}},
		{"nulls are the defaults", map[string]any{"return_logprob": []any{nil, true, nil}, "top_logprobs_num": []any{nil, nil, 2}, "logprob_start_len": nil},
			[]want{{false, -1, 0, nil}, {true, -1, 0, nil}, {false, -1, 0, nil}}},
	} {
		body := map[string]any{"text": texts, "sampling_params": map[string]any{"max_new_tokens": 2, "temperature": 0}}
		for k, v := range tc.fields {
			body[k] = v
		}
		code, data := ts.post(t, "/generate", body)
		var outs []genOutput
		if code != 200 || json.Unmarshal(data, &outs) != nil || len(outs) != len(texts) {
			t.Fatalf("%s: %d %s", tc.name, code, data)
		}
		for i, w := range tc.want {
			m := &outs[i].Meta
			prompt := len(fakemodel.Tokenizer{}.Encode(texts[i]))
			wantInput := 0
			if w.logprob && w.start >= 0 {
				wantInput = prompt - w.start
			}
			wantTop := 0
			if w.top > 0 {
				wantTop = 2 // one per output token
			}
			wantIDs := 0
			if w.ids != nil {
				wantIDs = 2
			}
			if (m.OutputLogprobs != nil) != w.logprob || len(m.InputLogprobs) != wantInput || len(m.OutputTop) != wantTop || len(m.OutputIDsLP) != wantIDs {
				t.Errorf("%s: prompt %d: %d output logprobs, %d input, %d top, %d token_ids; want %+v", tc.name, i,
					len(m.OutputLogprobs), len(m.InputLogprobs), len(m.OutputTop), len(m.OutputIDsLP), w)
				continue
			}
			for _, top := range m.OutputTop {
				if len(top) != w.top {
					t.Errorf("%s: prompt %d: %d top logprobs, want %d", tc.name, i, len(top), w.top)
				}
			}
			if w.start >= 0 && w.top > 0 && len(m.InputTop) != wantInput {
				t.Errorf("%s: prompt %d: %d input top logprobs, want %d", tc.name, i, len(m.InputTop), wantInput)
			}
			for _, pos := range m.OutputIDsLP {
				if len(pos) != len(w.ids) || pos[0].ID != w.ids[0] || pos[len(pos)-1].ID != w.ids[len(w.ids)-1] {
					t.Errorf("%s: prompt %d: token_ids logprobs %+v, want ids %v", tc.name, i, pos, w.ids)
				}
			}
		}
	}
	// One value for every prompt works with n > 1.
	code, data := ts.post(t, "/generate", map[string]any{"text": texts[:2], "return_logprob": true, "top_logprobs_num": 1, "token_ids_logprob": []int{65},
		"sampling_params": map[string]any{"max_new_tokens": 2, "n": 2}})
	var outs []genOutput
	if code != 200 || json.Unmarshal(data, &outs) != nil || len(outs) != 4 {
		t.Fatalf("n 2: %d %s", code, data)
	}
	for i, o := range outs {
		if len(o.Meta.OutputTop) != 2 || len(o.Meta.OutputTop[0]) != 1 || len(o.Meta.OutputIDsLP) != 2 {
			t.Errorf("n 2: output %d: %+v", i, o.Meta)
		}
	}
}

// TestGeneratePerPromptLogprobsRefused: a list of the wrong length or
// type, or a list where a prompt samples n > 1 times (SGLang refuses it
// too), gets a 400 naming the field.
func TestGeneratePerPromptLogprobsRefused(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	three := []string{"a", "b", "c"}
	n2 := map[string]any{"n": 2, "max_new_tokens": 1}
	for _, tc := range []struct {
		name        string
		text        any
		sampling    map[string]any
		fields      map[string]any
		param, want string
	}{
		{"return_logprob too short", three, nil, map[string]any{"return_logprob": []bool{true}}, "return_logprob", "1 values for 3 prompts"},
		{"logprob_start_len too long", three, nil, map[string]any{"logprob_start_len": []int{0, 0, 0, 0}}, "logprob_start_len", "4 values for 3 prompts"},
		{"top_logprobs_num too short", three, nil, map[string]any{"top_logprobs_num": []int{1, 2}}, "top_logprobs_num", "2 values for 3 prompts"},
		{"token_ids_logprob lists too short", three, nil, map[string]any{"token_ids_logprob": [][]int{{1}, {2}}}, "token_ids_logprob", "2 lists for 3 prompts"},
		{"a list for one prompt", "a", nil, map[string]any{"return_logprob": []bool{true, true}}, "return_logprob", "2 values for 1 prompt"},
		{"top_logprobs_num out of range", three, nil, map[string]any{"top_logprobs_num": []int{1, engine.MaxTopLogprobs + 1, 0}}, "top_logprobs_num", "top_logprobs_num[1] must be in"},
		{"top_logprobs_num out of range, one value", three, nil, map[string]any{"top_logprobs_num": -1}, "top_logprobs_num", "top_logprobs_num must be in"},
		{"top_logprobs_num not an integer", three, nil, map[string]any{"top_logprobs_num": []any{1, "x", 0}}, "top_logprobs_num", "top_logprobs_num[1]: expected an integer"},
		{"return_logprob not a boolean", three, nil, map[string]any{"return_logprob": "yes"}, "return_logprob", "expected a boolean, or a list of one per prompt"},
		{"logprob_start_len a fraction", three, nil, map[string]any{"logprob_start_len": 1.5}, "logprob_start_len", "expected an integer"},
		{"token_ids_logprob mixed", three, nil, map[string]any{"token_ids_logprob": []any{1, []int{2}, nil}}, "token_ids_logprob", "token_ids_logprob[0]: expected a list of token ids or null"},
		{"token_ids_logprob not ids", three, nil, map[string]any{"token_ids_logprob": "65"}, "token_ids_logprob", "expected a token id, a list of token ids"},
		{"return_logprob list with n 2", three, n2, map[string]any{"return_logprob": []bool{true, false, true}}, "return_logprob", "cannot be used with sampling_params.n > 1"},
		{"logprob_start_len list with n 2", three, n2, map[string]any{"logprob_start_len": []int{0, 0, 0}}, "logprob_start_len", "cannot be used with sampling_params.n > 1"},
		{"top_logprobs_num list with n 2", three, n2, map[string]any{"top_logprobs_num": []int{1, 1, 1}}, "top_logprobs_num", "cannot be used with sampling_params.n > 1"},
		{"token_ids_logprob lists with n 2", three, n2, map[string]any{"token_ids_logprob": [][]int{{1}, {2}, {3}}}, "token_ids_logprob", "cannot be used with sampling_params.n > 1"},
		{"a list for one prompt with n 2", "a", n2, map[string]any{"top_logprobs_num": []int{1}}, "top_logprobs_num", "cannot be used with sampling_params.n > 1"},
	} {
		body := map[string]any{"text": tc.text}
		if tc.sampling != nil {
			body["sampling_params"] = tc.sampling
		}
		for k, v := range tc.fields {
			body[k] = v
		}
		t.Run(tc.name, func(t *testing.T) { expectParam(t, ts, "/generate", body, tc.param, tc.want) })
	}
}
