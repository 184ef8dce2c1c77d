package server

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/ktserve/kt/constraint"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

func noReasoning(o *Options) { o.ReasoningParser = "none" }

// TestGenerateEBNF runs SGLang's EBNF test grammars (and recursive ones)
// on /generate with a model that answers at random: every finished output
// matches the grammar (and SGLang's check regex).
func TestGenerateEBNF(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{EOSAfter: 20}, engine.Config{}, noReasoning)
	for _, tc := range []struct{ name, ebnf, pattern string }{
		{"greeting", `root ::= "Hello" | "Hi" | "Hey"`, `^(Hello|Hi|Hey)$`},
		{"phone", "root ::= \"(\" area \")\" \" \" prefix \"-\" line\narea ::= [0-9] [0-9] [0-9]\nprefix ::= [0-9] [0-9] [0-9]\nline ::= [0-9] [0-9] [0-9] [0-9]", `^\(\d{3}\) \d{3}-\d{4}$`},
		{"hex color", "root ::= \"#\" hex hex hex hex hex hex\nhex ::= [0-9] | [A-F]", `^#[0-9A-F]{6}$`},
		{"complex json", `
			root ::= object
			object ::= "{" ws pair (ws "," ws pair)* ws "}"
			pair ::= "\"name\"" ws ":" ws value |
			         "\"age\"" ws ":" ws number |
			         "\"city\"" ws ":" ws string
			value ::= string | number
			string ::= "\"" [a-zA-Z0-9 ]+ "\""
			number ::= [1-9] [0-9]*
			ws ::= [ ]*`, `^\{.*\}$`},
		{"balanced (recursive)", "root ::= group+\ngroup ::= \"(\" group* \")\"", `^[()]+$`},
		{"arithmetic (left-recursive)", "root ::= expr\nexpr ::= expr (\"+\" | \"*\") term | term\nterm ::= [0-9] | \"(\" expr \")\"", `^[0-9+*()]+$`},
	} {
		g, err := constraint.ParseEBNF(tc.ebnf)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(tc.pattern)
		code, body := ts.post(t, "/generate", map[string]any{"text": "Generate:", "sampling_params": map[string]any{
			"ebnf": tc.ebnf, "max_new_tokens": 64, "temperature": 1, "n": 3, "sampling_seed": 11}})
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
		finished := 0
		for _, o := range outs {
			if o.Meta.FinishReason["type"] != "stop" {
				t.Logf("%s: unfinished %q", tc.name, o.Text)
				continue
			}
			finished++
			if !g.Match(o.Text) || !re.MatchString(o.Text) {
				t.Errorf("%s: %q does not match the grammar", tc.name, o.Text)
			}
		}
		if finished == 0 {
			t.Errorf("%s: no output finished", tc.name)
		}
	}
}

// TestOpenAIRouteEBNF: SGLang's ebnf extra body on chat and completions.
func TestOpenAIRouteEBNF(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{EOSAfter: 20}, engine.Config{}, noReasoning)
	src := "root ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= [a-z] | root"
	g, err := constraint.ParseEBNF(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := map[string]any{"model": modelName, "max_tokens": 80, "temperature": 1, "n": 3, "seed": 3, "ebnf": src}
		if path == "/v1/completions" {
			body["prompt"] = "list:"
		} else {
			body["messages"] = []map[string]any{{"role": "user", "content": "list"}}
		}
		code, raw := ts.post(t, path, body)
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, raw)
		}
		var r struct {
			Choices []struct {
				Text    string `json:"text"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		finished := 0
		for _, c := range r.Choices {
			text := c.Text + c.Message.Content
			if c.FinishReason != "stop" {
				continue
			}
			finished++
			if !g.Match(text) {
				t.Errorf("%s: %q does not match the grammar", path, text)
			}
		}
		if finished == 0 {
			t.Errorf("%s: no output finished", path)
		}
	}
}

// TestStructuralTagResponseFormat: free text, then the structure's schema
// between its begin and end once the trigger appears.
func TestStructuralTagResponseFormat(t *testing.T) {
	answer := `Checking. <function=get_weather>{"city": "Rome", "days": 2}</function> Done.`
	ts := newTestServer(t, fakemodel.Config{EOSAfter: 30, Script: scripted(map[string]string{"SCRIPT": answer})}, engine.Config{}, noReasoning)
	legacy := map[string]any{"type": "structural_tag",
		"structures": []any{map[string]any{"begin": "<function=get_weather>", "schema": json.RawMessage(weatherParams), "end": "</function>"}},
		"triggers":   []string{"<function="}}
	format := map[string]any{"type": "structural_tag", "format": map[string]any{"type": "triggered_tags", "triggers": []string{"<function="},
		"tags":         []any{map[string]any{"type": "tag", "begin": "<function=get_weather>", "content": map[string]any{"type": "json_schema", "json_schema": json.RawMessage(weatherParams)}, "end": "</function>"}},
		"at_least_one": true}}
	for name, rf := range map[string]map[string]any{"legacy": legacy, "format": format} {
		raw, _ := json.Marshal(rf)
		d, err := constraint.CompileStructuralTag(raw)
		if err != nil {
			t.Fatal(err)
		}
		// The model's own tagged answer passes unchanged.
		b := greedyBody("SCRIPT", 200)
		b["response_format"] = rf
		cs := chatChoices(t, ts, b)
		if len(cs) != 1 || cs[0].text != answer {
			t.Errorf("%s: %+v, want the scripted answer", name, cs)
		}
		// Random answers are held to the tags.
		b = greedyBody("RANDOM", 200)
		b["temperature"], b["n"], b["seed"] = 1, 3, 5
		b["response_format"] = rf
		for _, c := range chatChoices(t, ts, b) {
			if c.finish == "stop" && !d.Match(c.text) || c.finish != "stop" && !d.Prefix(c.text) {
				t.Errorf("%s: %s output %q is outside the structural tag", name, c.finish, c.text)
			}
		}
	}
}

// TestGenerateStructuralTag: sampling_params.structural_tag (a JSON string,
// as SGLang takes it) on /generate.
func TestGenerateStructuralTag(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{EOSAfter: 20}, engine.Config{}, noReasoning)
	tag := `{"type":"structural_tag","format":{"type":"tags_with_separator","separator":",","at_least_one":true,"tags":[{"type":"tag","begin":"<n>","content":{"type":"json_schema","json_schema":{"type":"integer","minimum":0,"maximum":99}},"end":"</n>"}]}}`
	d, err := constraint.CompileStructuralTag([]byte(tag))
	if err != nil {
		t.Fatal(err)
	}
	code, body := ts.post(t, "/generate", map[string]any{"text": "numbers:", "sampling_params": map[string]any{
		"structural_tag": tag, "max_new_tokens": 64, "temperature": 1, "n": 3, "sampling_seed": 2}})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var outs []struct {
		Text string `json:"text"`
		Meta struct {
			FinishReason map[string]any `json:"finish_reason"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal(body, &outs); err != nil {
		t.Fatal(err)
	}
	finished := 0
	for _, o := range outs {
		if o.Meta.FinishReason["type"] == "stop" {
			finished++
			if !d.Match(o.Text) {
				t.Errorf("%q is outside the structural tag", o.Text)
			}
		}
	}
	if finished == 0 {
		t.Error("no output finished")
	}
}

func TestGrammarRequestErrors(t *testing.T) {
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, noReasoning)
	chat := func(extra map[string]any) map[string]any {
		b := greedyBody("hi", 5)
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for _, tc := range []struct {
		name, path string
		body       any
		param, msg string
	}{
		{"generate unparsable", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"ebnf": `root ::= "a`}}, "sampling_params.ebnf", "unterminated string"},
		{"generate unsatisfiable", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"ebnf": "root ::= a\na ::= \"x\" a"}}, "sampling_params.ebnf", "matches nothing"},
		{"generate ebnf and regex", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"ebnf": `root ::= "a"`, "regex": "a"}}, "sampling_params", "Only one of"},
		{"chat unparsable", "/v1/chat/completions", chat(map[string]any{"ebnf": "root ::= [a-"}), "ebnf", "character class"},
		{"chat ebnf and response_format", "/v1/chat/completions", chat(map[string]any{"ebnf": `root ::= "a"`, "response_format": map[string]any{"type": "json_object"}}), "response_format", "Only one of"},
		{"completions no root", "/v1/completions", map[string]any{"prompt": "a", "ebnf": `start ::= "a"`}, "ebnf", "no root rule"},
		{"structural tag bad trigger", "/v1/chat/completions", chat(map[string]any{"response_format": map[string]any{"type": "structural_tag",
			"structures": []any{map[string]any{"begin": "<a>", "end": "</a>"}}, "triggers": []string{"<b"}}}), "response_format", "starts with none of the triggers"},
		{"generate structural tag bad", "/generate", map[string]any{"text": "a", "sampling_params": map[string]any{"structural_tag": `{"type":"structural_tag","format":{"type":"tag"}}`}}, "sampling_params.structural_tag", "a tag needs"},
		{"structural tag bad format", "/v1/chat/completions", chat(map[string]any{"response_format": map[string]any{"type": "structural_tag", "format": map[string]any{"type": "magic"}}}), "response_format", "format.type"},
	} {
		code, raw := ts.post(t, tc.path, tc.body)
		var e errorBody
		_ = json.Unmarshal(raw, &e)
		if code != 400 || e.Error.Param == nil || *e.Error.Param != tc.param || !strings.Contains(e.Error.Message, tc.msg) {
			t.Errorf("%s: %d %s, want 400 param %q with %q", tc.name, code, raw, tc.param, tc.msg)
		}
	}
}
