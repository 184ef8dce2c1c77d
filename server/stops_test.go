package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

// plainEOSTokenizer is the byte-level tokenizer with <|im_end|> (the EOS)
// not marked special, so skip_special_tokens does not hide it.
type plainEOSTokenizer struct{ fakemodel.Tokenizer }

func (plainEOSTokenizer) IsSpecial(id int32) bool {
	return id == fakemodel.EndOfText || id == fakemodel.IMStart
}

// countPrompt is a ChatML prompt the scripted model answers with
// countAnswer, then EOS.
const (
	countPrompt = "<|im_start|>user\nCOUNT<|im_end|>\n<|im_start|>assistant\n"
	countAnswer = "one 22 three 4444 five;six"
)

// escapePrompt is answered with escapeAnswer, whose pattern-like text
// `\d` comes before its first digit.
const (
	escapePrompt = "<|im_start|>user\nESCAPE<|im_end|>\n<|im_start|>assistant\n"
	escapeAnswer = `match \d then 7 end`
)

// completionsStream posts a streaming /v1/completions request and returns
// the text of its deltas and the last choice's finish_reason and
// matched_stop.
func completionsStream(t *testing.T, ts *testServer, body map[string]any) (text, finish string, matched any) {
	t.Helper()
	b := map[string]any{"stream": true}
	for k, v := range body {
		b[k] = v
	}
	data, _ := json.Marshal(b)
	resp, err := http.Post(ts.url+"/v1/completions", "application/json", strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var all strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		all.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var sb strings.Builder
	for _, ev := range strings.Split(strings.TrimSpace(all.String()), "\n\n") {
		p := strings.TrimPrefix(ev, "data: ")
		if p == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
				MatchedStop  any     `json:"matched_stop"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(p), &c); err != nil {
			t.Fatalf("event %q: %v", p, err)
		}
		for _, ch := range c.Choices {
			sb.WriteString(ch.Text)
			if ch.FinishReason != nil {
				finish, matched = *ch.FinishReason, ch.MatchedStop
			}
		}
	}
	return sb.String(), finish, matched
}

// TestStopHandling: stop strings, stop regexes, stop tokens and EOS end the
// output as SGLang's do, and matched_stop names them. A stop string or
// token is not in the text unless no_stop_trim. A regex match stays in the
// text: the output is cut only where the pattern text itself first occurs
// verbatim (after it with no_stop_trim). Stop strings are looked for
// before regexes, each kind in the order given. Streamed text adds up to
// the same.
func TestStopHandling(t *testing.T) {
	script := fakemodel.Config{Script: scripted(map[string]string{"COUNT": countAnswer, "ESCAPE": escapeAnswer})}
	plain := func(o *Options) { o.Tokenizer = plainEOSTokenizer{} }
	servers := map[bool]*testServer{false: newTestServer(t, script, engine.Config{}, nil), true: newTestServer(t, script, engine.Config{}, plain)}
	eos := float64(fakemodel.IMEnd)
	for _, tc := range []struct {
		name     string
		prompt   string // countPrompt if empty
		plainEOS bool   // EOS not a special token
		params   map[string]any
		want     string
		matched  any
		lastID   int32 // the last output id
	}{
		{"string", "", false, map[string]any{"stop": []string{"zz", "three"}}, "one 22 ", "three", -1},
		{"string kept", "", false, map[string]any{"stop": "three", "no_stop_trim": true}, "one 22 three", "three", -1},
		{"regex", "", false, map[string]any{"stop_regex": `\d+ t`}, "one 22 t", `\d+ t`, -1},
		{"regex kept", "", false, map[string]any{"stop_regex": `\d+ t`, "no_stop_trim": true}, "one 22 t", `\d+ t`, -1},
		{"regex list", "", false, map[string]any{"stop_regex": []string{"x{3}", `\d{4}`}}, "one 22 three 4444", `\d{4}`, -1},
		{"regex anchored", "", false, map[string]any{"stop_regex": "^one"}, "one", "^one", -1},
		{"regex unbounded", "", false, map[string]any{"stop_regex": "[0-9]+"}, "one 2", "[0-9]+", -1},
		{"regex pattern text in the output", "", false, map[string]any{"stop_regex": "three"}, "one 22 ", "three", -1},
		{"regex pattern text in the output, kept", "", false, map[string]any{"stop_regex": "three", "no_stop_trim": true}, "one 22 three", "three", -1},
		{"regexes in the order given", "", false, map[string]any{"stop_regex": []string{"2 ", "22 "}}, "one 2", "2 ", -1},
		{"regexes in the order given, reversed", "", false, map[string]any{"stop_regex": []string{"22 ", "2 "}}, "one ", "22 ", -1},
		{"string before regex", "", false, map[string]any{"stop_regex": "2 t.*ee", "stop": "three"}, "one 22 ", "three", -1},
		{"regex before a later string", "", false, map[string]any{"stop_regex": "f.v", "stop": "six"}, "one 22 three 4444 fiv", "f.v", -1},
		{"regex cut at earlier pattern text", escapePrompt, false, map[string]any{"stop_regex": `\d`}, "match ", `\d`, -1},
		{"regex cut at earlier pattern text, kept", escapePrompt, false, map[string]any{"stop_regex": `\d`, "no_stop_trim": true}, `match \d`, `\d`, -1},
		{"regex matching its own text", escapePrompt, false, map[string]any{"stop_regex": `\\d`}, `match \d`, `\\d`, -1},
		{"regex pattern text, no stop", escapePrompt, false, map[string]any{"stop_regex": `\d`, "max_new_tokens": 10}, `match \d t`, nil, -1},
		{"regex no match", "", false, map[string]any{"stop_regex": "zzz"}, countAnswer, eos, fakemodel.IMEnd},
		{"stop token", "", false, map[string]any{"stop_token_ids": []int{';'}}, "one 22 three 4444 five", float64(';'), ';'},
		{"stop token kept", "", false, map[string]any{"stop_token_ids": []int{';'}, "no_stop_trim": true}, "one 22 three 4444 five;", float64(';'), ';'},
		{"EOS, special tokens shown", "", false, map[string]any{"skip_special_tokens": false}, countAnswer, eos, fakemodel.IMEnd},
		{"EOS kept", "", false, map[string]any{"skip_special_tokens": false, "no_stop_trim": true}, countAnswer + "<|im_end|>", eos, fakemodel.IMEnd},
		{"EOS not special", "", true, map[string]any{}, countAnswer, eos, fakemodel.IMEnd},
		{"EOS not special, kept", "", true, map[string]any{"no_stop_trim": true}, countAnswer + "<|im_end|>", eos, fakemodel.IMEnd},
		{"ignore_eos", "", true, map[string]any{"ignore_eos": true, "max_new_tokens": len(countAnswer) + 1}, countAnswer + "<|im_end|>", nil, fakemodel.IMEnd},
	} {
		ts := servers[tc.plainEOS]
		sp := map[string]any{"max_new_tokens": 60, "temperature": 0}
		for k, v := range tc.params {
			sp[k] = v
		}
		prompt := tc.prompt
		if prompt == "" {
			prompt = countPrompt
		}
		g := ts.generate(t, map[string]any{"text": prompt, "sampling_params": sp})
		wantType := "stop"
		if tc.matched == nil {
			wantType = "length"
		}
		if g.Text != tc.want || g.Meta.FinishReason["type"] != wantType || g.Meta.FinishReason["matched"] != tc.matched {
			t.Errorf("%s: /generate %q %v, want %q matched %v", tc.name, g.Text, g.Meta.FinishReason, tc.want, tc.matched)
		}
		if tc.lastID >= 0 && (len(g.OutputIDs) == 0 || g.OutputIDs[len(g.OutputIDs)-1] != tc.lastID || g.Meta.CompletionTokens != len(g.OutputIDs)) {
			t.Errorf("%s: output ids %v, want the stop token %d last", tc.name, g.OutputIDs, tc.lastID)
		}
		// /v1/completions, whole and streamed, says the same.
		body := map[string]any{"prompt": prompt, "temperature": 0, "max_tokens": sp["max_new_tokens"]}
		for k, v := range tc.params {
			if k != "max_new_tokens" {
				body[k] = v
			}
		}
		code, data := ts.post(t, "/v1/completions", body)
		var r struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
				MatchedStop  any    `json:"matched_stop"`
			} `json:"choices"`
		}
		if code != 200 || json.Unmarshal(data, &r) != nil || r.Choices[0].Text != tc.want || r.Choices[0].MatchedStop != tc.matched || r.Choices[0].FinishReason != wantType {
			t.Errorf("%s: completions %d %s", tc.name, code, data)
		}
		text, finish, matched := completionsStream(t, ts, body)
		if text != tc.want || finish != wantType || matched != tc.matched {
			t.Errorf("%s: stream %q %s %v", tc.name, text, finish, matched)
		}
	}
	// Chat takes stop_regex in the request body too.
	b := greedyBody("COUNT", 50)
	b["stop_regex"] = `\d{4}`
	code, data := servers[false].post(t, "/v1/chat/completions", b)
	var r chatResponse
	if code != 200 || json.Unmarshal(data, &r) != nil || *r.Choices[0].Message.Content != "one 22 three 4444" || string(r.Choices[0].MatchedStop) != `"\\d{4}"` {
		t.Errorf("chat stop_regex: %d %s", code, data)
	}
	// A regex-constrained output ends at its EOS without the EOS text,
	// even where the tokenizer does not call EOS special.
	for _, plainEOS := range []bool{false, true} {
		g := servers[plainEOS].generate(t, map[string]any{"text": "hi", "sampling_params": map[string]any{"regex": "abc", "max_new_tokens": 10, "skip_special_tokens": false}})
		if g.Text != "abc" || g.Meta.FinishReason["matched"] != eos {
			t.Errorf("regex-constrained (EOS plain %v): %q %v", plainEOS, g.Text, g.Meta.FinishReason)
		}
	}
}

// TestStopMatcherStream feeds an output to stopMatcher a byte (a token of
// the byte-level tokenizer) at a time, as run does, and checks the final
// text, matched_stop, and that what a stream sends before the end never
// goes past it: held is the text still held back when the last byte came.
func TestStopMatcherStream(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strs     []string
		res      []string
		keep     bool // no_stop_trim
		output   string
		want     string
		matched  string // "": no stop
		wantHeld string
	}{
		{"string", []string{"three"}, nil, false, countAnswer, "one 22 ", "three", "thre"},
		{"string kept", []string{"three"}, nil, true, countAnswer, "one 22 three", "three", "thre"},
		{"strings in the order given", []string{"ee", "three"}, nil, false, countAnswer, "one 22 thr", "ee", "thre"},
		{"regex match stays", nil, []string{`\d+ t`}, false, countAnswer, "one 22 t", `\d+ t`, " 22 "},
		{"regex pattern text cut", nil, []string{"three"}, false, countAnswer, "one 22 ", "three", "thre"},
		{"regex pattern text kept", nil, []string{"three"}, true, countAnswer, "one 22 three", "three", "thre"},
		{"regex cut before the match", nil, []string{`\d`}, false, escapeAnswer, "match ", `\d`, `\d then `},
		{"regex cut before the match, kept", nil, []string{`\d`}, true, escapeAnswer, `match \d`, `\d`, `\d then `},
		{"regex pattern text, no stop", nil, []string{`\d`}, false, `match \d t`, `match \d t`, "", `\d `},
		{"regex list order", nil, []string{"2 ", "22 "}, false, countAnswer, "one 2", "2 ", "22"},
		{"strings before regexes", []string{"three"}, []string{"2 t.*ee"}, false, countAnswer, "one 22 ", "three", "2 thre"},
	} {
		var res []stopRegex
		if tc.res != nil {
			raw, _ := json.Marshal(tc.res)
			var err error
			if res, err = parseStopRegex(raw, "stop_regex"); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		m := newStopMatcher(tc.strs, res)
		sent := 0
		var streamed, final, matched, held string
		found := false
		for i := 1; i <= len(tc.output); i++ {
			text := tc.output[:i]
			held = tc.output[sent : i-1]
			if hit, ok := m.find(text, i-1); ok {
				end := hit.cut
				if tc.keep {
					end = hit.keep
				}
				if end < sent {
					t.Errorf("%s: the stream sent %q, past the end %q", tc.name, text[:sent], text[:end])
					end = sent
				}
				streamed += text[sent:end]
				final, matched, found = text[:end], hit.matched, true
				break
			}
			safe := max(sent, m.safeEnd(text))
			streamed += text[sent:safe]
			sent = safe
		}
		if !found {
			streamed += tc.output[sent:]
			final = tc.output
		}
		if final != tc.want || matched != tc.matched || found != (tc.matched != "") || streamed != final || held != tc.wantHeld {
			t.Errorf("%s: final %q matched %q streamed %q held %q; want %q %q held %q",
				tc.name, final, matched, streamed, held, tc.want, tc.matched, tc.wantHeld)
		}
	}
}
