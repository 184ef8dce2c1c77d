package constraint

import (
	"strings"
	"testing"
)

func TestStructuralTag(t *testing.T) {
	const weather = `{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]}},"required":["city"],"additionalProperties":false}`
	for _, tc := range []struct {
		name   string
		tag    string
		accept []string
		reject []string
	}{
		{"legacy", `{"type":"structural_tag","structures":[{"begin":"<function=get_weather>","schema":` + weather + `,"end":"</function>"}],"triggers":["<function="]}`,
			[]string{
				"",
				"just text",
				`Let me check. <function=get_weather>{"city": "Paris"}</function> done`,
				`<function=get_weather>{"city":"Rome"}</function><function=get_weather>{"city":"Paris"}</function>`,
				"a < b and <functio",
			},
			[]string{
				`<function=get_weather>{"city": "Berlin"}</function>`,
				`<function=other>{}</function>`,
				`<function=get_weather>{"city": "Paris"}`,
				`text <function=`,
			}},
		{"legacy without schema", `{"type":"structural_tag","structures":[{"begin":"<j>","end":"</j>"}],"triggers":["<j>"]}`,
			[]string{`x<j>[1, {"a": null}]</j>y`}, []string{`<j>not json</j>`}},
		{"triggered at least one, stop after first", `{"type":"structural_tag","format":{"type":"triggered_tags","triggers":["<t>"],"tags":[{"type":"tag","begin":"<t>","content":{"type":"const_string","value":"X"},"end":"</t>"}],"at_least_one":true,"stop_after_first":true}}`,
			[]string{"<t>X</t>", "hello <t>X</t>"}, []string{"", "hello", "<t>X</t> more", "<t>X</t><t>X</t>"}},
		{"tags with separator", `{"type":"structural_tag","format":{"type":"tags_with_separator","separator":"\n","at_least_one":true,"tags":[{"type":"tag","begin":"<a>","content":{"type":"json_schema","json_schema":{"type":"integer"}},"end":"</a>"},{"type":"tag","begin":"<b>","content":{"type":"regex","pattern":"^[xy]+$"},"end":"</b>"}]}}`,
			[]string{"<a>12</a>", "<a>1</a>\n<b>xyx</b>\n<a>-3</a>"}, []string{"", "<a>1</a><b>x</b>", "<a>x</a>", "<a>1</a>\n"}},
		{"sequence, or, grammar, any_text", `{"type":"structural_tag","format":{"type":"sequence","elements":[{"type":"or","elements":[{"type":"const_string","value":"yes"},{"type":"grammar","grammar":"root ::= \"n\" \"o\"+"}]},{"type":"tag","begin":" <note>","content":{"type":"any_text"},"end":"</note>"}]}}`,
			[]string{"yes <note>anything < here</note>", "nooo <note></note>"}, []string{"yes <note>a</note> b</note>", "maybe <note>x</note>", "yes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := CompileStructuralTag([]byte(tc.tag))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.accept {
				if !d.Match(s) {
					t.Errorf("refuses %q", s)
				}
			}
			for _, s := range tc.reject {
				if d.Match(s) {
					t.Errorf("accepts %q", s)
				}
			}
		})
	}
}

func TestStructuralTagErrors(t *testing.T) {
	for _, tc := range []struct{ tag, want string }{
		{`[]`, "expected an object"},
		{`{"type":"structural_tag","structures":[],"triggers":["<"]}`, "at least one structure"},
		{`{"type":"structural_tag","structures":[{"begin":"<a>","end":"</a>"}],"triggers":[]}`, "at least one trigger"},
		{`{"type":"structural_tag","structures":[{"begin":"<a>","end":"</a>"}],"triggers":["<b"]}`, "structures[0].begin"},
		{`{"type":"structural_tag","structures":[{"begin":"<a>","end":"</a>"}],"triggers":[""]}`, "must not be empty"},
		{`{"type":"structural_tag","structures":[{"begin":"<a>","schema":{"type":"strange"},"end":"</a>"}],"triggers":["<a"]}`, "structures[0].schema"},
		{`{"type":"structural_tag","structures":[{"begin":"<a>","end":"</a>"}],"triggers":["<a"],"extra":1}`, "extra: unknown field"},
		{`{"type":"structural_tag","format":{"type":"nope"}}`, "format.type"},
		{`{"type":"structural_tag","format":{"type":"const_string"}}`, "format.value: required"},
		{`{"type":"structural_tag","format":{"type":"const_string","value":"a","pattern":"b"}}`, "format.pattern: unknown field"},
		{`{"type":"structural_tag","format":{"type":"regex","pattern":"a\\b"}}`, "word boundaries"},
		{`{"type":"structural_tag","format":{"type":"grammar","grammar":"root ::= \"(\" root \")\" | \"\""}}`, "must not be recursive"},
		{`{"type":"structural_tag","format":{"type":"sequence","elements":[{"type":"tag","begin":"a","end":"b"}]}}`, "format.elements[0]: a tag needs"},
		{`{"type":"structural_tag","format":{"type":"triggered_tags","triggers":["<x"],"tags":[{"type":"const_string","value":"a"}]}}`, "expected a tag format"},
		{`{"type":"structural_tag","format":{"type":"const_string","value":"a"},"triggers":[]}`, "unknown field"},
	} {
		_, err := CompileStructuralTag([]byte(tc.tag))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.tag, err, tc.want)
		}
	}
}
