package constraint

import (
	"errors"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSchemaMatches(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		match, not   []string
	}{
		{"object required and optional", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ok":{"type":"boolean"}},"required":["age"]}`,
			[]string{`{"age":1}`, `{"name":"a","age":-2}`, `{ "age" : 3 , "ok" : true }`, `{"name":"x\"y\u00e9","age":0,"ok":false}`, "{\n  \"age\": 7\n}"},
			[]string{`{}`, `{"name":"a"}`, `{"age":1,"name":"a"}`, `{"age":01}`, `{"age":1,"extra":2}`, `{"age":1.5}`, `{"age":1,}`}},
		{"all optional", `{"type":"object","properties":{"a":{"type":"null"},"b":{"type":"number"}}}`,
			[]string{`{}`, `{"a":null}`, `{"b":1.5e3}`, `{"a":null,"b":-0.25}`},
			[]string{`{"b":1,"a":null}`, `{"b":.5}`, `{"a":null,}`}},
		{"empty object type", `{"type":"object"}`, []string{`{}`, `{ }`}, []string{`{"a":1}`}},
		{"array bounds", `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}`,
			[]string{`[1]`, `[1, 2,3]`}, []string{`[]`, `[1,2,3,4]`, `[1,]`}},
		{"array no min", `{"type":"array","items":{"type":"string"},"maxItems":2}`,
			[]string{`[]`, `["a"]`, `["a","b"]`}, []string{`["a","b","c"]`}},
		{"enum", `{"enum":["red","green",3,null,{"a":[1]}]}`,
			[]string{`"red"`, `3`, `null`, `{"a":[1]}`}, []string{`"blue"`, `"Red"`, `4`}},
		{"enum filtered by type", `{"type":"string","enum":["a",1]}`, []string{`"a"`}, []string{`1`}},
		{"const", `{"const":"x"}`, []string{`"x"`}, []string{`"y"`}},
		{"anyOf nullable", `{"anyOf":[{"type":"integer"},{"type":"null"}]}`, []string{`5`, `null`}, []string{`"5"`}},
		{"type list", `{"type":["string","null"]}`, []string{`"s"`, `null`}, []string{`1`}},
		{"ref and defs", `{"$defs":{"P":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"],"additionalProperties":false}},"type":"object","properties":{"p":{"$ref":"#/$defs/P"},"q":{"type":"array","items":{"$ref":"#/$defs/P"}}},"required":["p","q"]}`,
			[]string{`{"p":{"x":1},"q":[{"x":2},{"x":3}]}`}, []string{`{"p":{},"q":[]}`}},
		{"definitions", `{"definitions":{"s":{"type":"string"}},"$ref":"#/definitions/s"}`, []string{`"a"`}, []string{`1`}},
		{"string lengths", `{"type":"string","minLength":2,"maxLength":3}`, []string{`"ab"`, `"a\nb"`, `"éé"`}, []string{`"a"`, `"abcd"`}},
		{"pattern", `{"type":"string","pattern":"^[a-z]+-\\d{2}$"}`, []string{`"ab-12"`}, []string{`"ab-1"`, `"AB-12"`}},
		{"pattern dot excludes quote", `{"type":"string","pattern":"a.c"}`, []string{`"abc"`}, []string{`"a"c"`}},
		{"date", `{"type":"string","format":"date"}`, []string{`"2024-02-29"`, `"2000-02-29"`, `"2023-04-30"`, `"2023-12-31"`}, []string{`"2024-13-01"`, `"24-01-01"`, `"2023-02-29"`, `"1900-02-29"`, `"2023-04-31"`, `"2023-02-30"`}},
		{"date-time", `{"type":"string","format":"date-time"}`, []string{`"2024-02-29T12:30:00Z"`, `"2024-02-29T12:30:00.5+02:00"`}, []string{`"2024-02-29 12:30:00Z"`}},
		{"uri", `{"type":"string","format":"uri"}`, []string{`"https://example.com:8080/a/b?x=1&y=2"`, `"http://a.b"`}, []string{`"example.com"`, `"ftp://x"`, `"https://"`}},
		{"uuid", `{"format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123e4567"`}},
		{"integer range", `{"type":"integer","minimum":-12,"maximum":107}`, []string{`-12`, `0`, `9`, `10`, `99`, `107`}, []string{`-13`, `108`, `-0`, `007`, `1000`}},
		{"exclusive range", `{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10}`, []string{`1`, `9`}, []string{`0`, `10`}},
		{"any (two levels deep)", `{}`, []string{`1`, `"s"`, `{"a":[1,"x"]}`, `[]`, `[[]]`}, []string{`{"a":}`, `nul`, `{"a":[{}]}`}},
		{"allOf one", `{"allOf":[{"type":"boolean"}]}`, []string{`true`}, []string{`1`}},
		{"annotations", `{"title":"T","description":"d","type":"integer","default":1,"examples":[1]}`, []string{`5`}, []string{`"5"`}},
		{"key needing no HTML escape", `{"type":"object","properties":{"a<b&\"c":{"type":"null"}},"required":["a<b&\"c"]}`, []string{`{"a<b&\"c":null}`}, []string{`{"a\u003cb\u0026\"c":null}`}},
		// The shape of openai-python's to_strict_json_schema(pydantic model).
		{"pydantic strict", `{"$defs":{"Step":{"properties":{"explanation":{"title":"Explanation","type":"string"},"output":{"title":"Output","type":"string"}},"required":["explanation","output"],"title":"Step","type":"object","additionalProperties":false},"Color":{"enum":["red","blue"],"title":"Color","type":"string"}},"properties":{"steps":{"items":{"$ref":"#/$defs/Step"},"title":"Steps","type":"array"},"final_answer":{"title":"Final Answer","type":"string"},"color":{"$ref":"#/$defs/Color"},"note":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"title":"Note"}},"required":["steps","final_answer","color","note"],"title":"MathReasoning","type":"object","additionalProperties":false}`,
			[]string{`{"steps":[{"explanation":"a","output":"b"}],"final_answer":"x","color":"red","note":null}`, `{"steps": [], "final_answer": "", "color": "blue", "note": "n"}`},
			[]string{`{"steps":[],"final_answer":"x","color":"green","note":null}`, `{"steps":[],"final_answer":"x","color":"red"}`}},
		{"map", `{"type":"object","additionalProperties":{"type":"integer"}}`, []string{`{}`, `{"a":1,"b":-2}`}, []string{`{"a":"x"}`, `{"a":1,}`}},
		{"map of anything", `{"type":"object","additionalProperties":true}`, []string{`{}`, `{"a":[1],"b":{"c":null}}`}, []string{`{"a"}`}},
		{"tuple", `{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"minItems":2,"maxItems":2}`, []string{`[1,"a"]`, `[ 2 , "b" ]`}, []string{`[1]`, `[1,"a",2]`, `["a",1]`}},
		{"tuple items false", `{"type":"array","prefixItems":[{"type":"null"}],"items":false,"minItems":1}`, []string{`[null]`}, []string{`[]`, `[null,null]`}},
		{"items false", `{"type":"array","items":false}`, []string{`[]`}, []string{`[1]`}},
		{"no surrounding whitespace", `{"type":"null"}`, []string{`null`}, []string{` null`, "null\n", `nul l`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := CompileSchema([]byte(tc.schema), SchemaOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tc.name, "pydantic strict") {
				if _, err := CompileSchema([]byte(tc.schema), SchemaOptions{Strict: true}); err != nil {
					t.Fatalf("strict: %v", err)
				}
			}
			for _, s := range tc.match {
				if !d.Match(s) {
					t.Errorf("%s does not match", s)
				}
			}
			for _, s := range tc.not {
				if d.Match(s) {
					t.Errorf("%s matches", s)
				}
			}
		})
	}
}

func TestSchemaRefusals(t *testing.T) {
	for _, tc := range []struct {
		schema string
		strict bool
		want   string
	}{
		{`{"type":"object","patternProperties":{"^a":{}}}`, false, `"patternProperties"`},
		{`{"type":"object","properties":{"a":{}},"additionalProperties":true}`, false, `"additionalProperties"`},
		{`{"type":"object","additionalProperties":{"type":"string"}}`, true, `"additionalProperties"`},
		{`{"type":"array","prefixItems":[]}`, false, `"prefixItems"`},
		{`{"type":"array","prefixItems":[{"type":"null"}]}`, false, `fixed-length tuples`},
		{`{"type":"array","uniqueItems":true}`, false, `"uniqueItems"`},
		{`{"type":"number","minimum":0.5}`, false, `fractional bounds`},
		{`{"type":"number","minimum":3,"exclusiveMaximum":3}`, false, `no number`},
		{`{"type":"integer","multipleOf":2}`, false, `"multipleOf"`},
		{`{"type":"string","format":"hostname"}`, false, `"hostname"`},
		{`{"type":"string","pattern":"a\"b"}`, false, `must escape`},
		{`{"type":"string","pattern":"a\\bb"}`, false, `word boundaries`},
		{`{"type":"string","pattern":"(("}`, false, `"pattern"`},
		{`{"allOf":[{"type":"string"},{"minLength":1}]}`, false, `"allOf"`},
		{`{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`, false, `recursive`},
		{`{"$ref":"http://example.com/s.json"}`, false, `only local`},
		{`{"$ref":"#/$defs/missing"}`, false, `does not resolve`},
		{`{"$ref":"#/$defs/a","type":"string","$defs":{"a":{}}}`, false, `keyword "type": is not supported beside "$ref"`},
		{`{"type":"strin"}`, false, `unknown type`},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, false, `"b" is not in properties`},
		{`{"enum":[]}`, false, `"enum"`},
		{`false`, false, `matches nothing`},
		{`[1]`, false, `must be an object`},
		{`{"type":"integer","minimum":5,"maximum":4}`, false, `no integer`},
		{`{"type":"string","maxLength":513}`, false, `over 512`},
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, true, `additionalProperties to be supplied`},
		{`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}`, true, `missing "b"`},
		{`{"anyOf":[{"type":"object"}]}`, true, `root schema`},
		{`not json`, false, `not valid JSON`},
		{`{"type":"array","minItems":200}`, false, `keyword "minItems": minItems 200`},
		{`{"type":"array","minItems":1,"maxItems":101}`, false, `keyword "maxItems": maxItems 101`},
		{`{"type":"string","maxLength":1000000000000}`, false, `1000000000000 is larger than`},
		{`{"type":"string","minLength":1.5}`, false, `must be a non-negative integer, got 1.5`},
	} {
		_, err := CompileSchema([]byte(tc.schema), SchemaOptions{Strict: tc.strict})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %s", tc.schema, err, tc.want)
		}
	}
	// Strict mode accepts a schema that follows its rules.
	if _, err := CompileSchema([]byte(`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`), SchemaOptions{Strict: true}); err != nil {
		t.Error(err)
	}
}

func TestSchemaTooLarge(t *testing.T) {
	// Nested arrays of bounded length multiply states.
	s := `{"type":"string","maxLength":500}`
	for range 6 {
		s = `{"type":"array","items":` + s + `,"maxItems":100}`
	}
	_, err := CompileSchema([]byte(s), SchemaOptions{})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("got %v, want ErrTooLarge", err)
	}
	// $ref fan-out: each level refers to the previous twice.
	defs := `"d0":{}`
	for i := 1; i < 20; i++ {
		p := strconv.Quote("#/$defs/d" + strconv.Itoa(i-1))
		defs += `,"d` + strconv.Itoa(i) + `":{"type":"array","items":{"anyOf":[{"$ref":` + p + `},{"$ref":` + p + `}]}}`
	}
	_, err = CompileSchema([]byte(`{"$defs":{`+defs+`},"$ref":"#/$defs/d19"}`), SchemaOptions{})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("ref fan-out: got %v, want ErrTooLarge", err)
	}
}

// TestSchemaManyOptionalProperties refuses an object of thousands of
// optional properties (whose alternation grows with the square of their
// count) without building it: the allocations stay bounded.
func TestSchemaManyOptionalProperties(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		required bool
	}{
		{"8000 optional", 8000, false},
		{"30000 optional", 30000, false},
		{"8000 required", 8000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString(`{"type":"object","properties":{`)
			var req []string
			for i := range tc.n {
				if i > 0 {
					b.WriteString(",")
				}
				name := strconv.Quote("property_" + strconv.Itoa(i))
				b.WriteString(name + `:{"type":"null"}`)
				req = append(req, name)
			}
			b.WriteString(`}`)
			if tc.required {
				b.WriteString(`,"required":[` + strings.Join(req, ",") + `]`)
			}
			b.WriteString(`}`)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := CompileSchema([]byte(b.String()), SchemaOptions{})
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("got %v, want ErrTooLarge", err)
			}
			t.Logf("refused after %v", took)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
				t.Errorf("allocated %d MiB, want under 256", alloc>>20)
			}
		})
	}
	// A few dozen optional properties still compile.
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range 40 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"p` + strconv.Itoa(i) + `":{"type":"integer"}`)
	}
	b.WriteString(`}}`)
	d, err := CompileSchema([]byte(b.String()), SchemaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Match(`{"p3":1,"p39":2}`) || d.Match(`{"p39":2,"p3":1}`) {
		t.Error("40 optional properties: wrong language")
	}
}

// TestNumberBounds checks bounded numbers against their values on a grid
// of decimals, for many integer bound combinations.
func TestNumberBounds(t *testing.T) {
	var inputs []string
	for i := -12; i <= 12; i++ {
		for _, f := range []string{"", ".0", ".00", ".5", ".05", ".999"} {
			n := strconv.Itoa(i) + f
			inputs = append(inputs, n)
			if i == 0 {
				inputs = append(inputs, "-0"+f)
			}
		}
	}
	bounds := []int64{-10, -3, -1, 0, 1, 2, 7}
	for _, lo := range append(bounds, 99) {
		for _, hi := range append(bounds, 99) {
			for _, ex := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				b := numBounds{hasLo: lo != 99, lo: lo, loExcl: ex[0], hasHi: hi != 99, hi: hi, hiExcl: ex[1]}
				r := b.regex()
				var re *regexp.Regexp
				if r != "" {
					re = regexp.MustCompile("^" + r + "$")
				}
				for _, in := range inputs {
					x, _ := strconv.ParseFloat(in, 64)
					want := (!b.hasLo || x > float64(lo) || x == float64(lo) && !b.loExcl) &&
						(!b.hasHi || x < float64(hi) || x == float64(hi) && !b.hiExcl)
					got := re != nil && re.MatchString(in)
					if got != want && !(want && strings.HasPrefix(in, "-0") && x == 0) {
						t.Fatalf("%+v: %s matches %v, in range %v (regex %s)", b, in, got, want, r)
					}
				}
			}
		}
	}
}

func TestIntRangeExhaustive(t *testing.T) {
	for _, r := range [][2]int64{{0, 0}, {-5, 5}, {7, 7}, {-100, -3}, {1, 1000}, {19, 231}, {-999, 0}, {100, 199}, {0, 9}, {10, 99}} {
		re := regexp.MustCompile(`^` + intRange(r[0], r[1]) + `$`)
		for n := int64(-1100); n <= 1100; n++ {
			in := n >= r[0] && n <= r[1]
			if got := re.MatchString(strconv.FormatInt(n, 10)); got != in {
				t.Fatalf("[%d, %d]: %d matches %v", r[0], r[1], n, got)
			}
		}
		if re.MatchString("-0") || re.MatchString("01") {
			t.Errorf("[%d, %d] matches a non-canonical integer", r[0], r[1])
		}
	}
}

// TestSchemaSingleLine: SingleLine allows spaces and tabs between tokens
// but no newline, in described and in free-form values alike.
func TestSchemaSingleLine(t *testing.T) {
	schema := []byte(`{"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}, "required": ["a"]}`)
	for _, tc := range []struct {
		text       string
		line, full bool // accepted with SingleLine, without
	}{
		{`{"a": 1, "b": [1, {"x": null}]}`, true, true},
		{"{\t\"a\":1}", true, true},
		{"{\n\"a\": 1}", false, true},
		{"{\"a\": 1, \"b\": [1,\n2]}", false, true},
		{`{"a": "x"}`, false, false},
	} {
		for _, single := range []bool{true, false} {
			d, err := CompileSchema(schema, SchemaOptions{SingleLine: single})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.full
			if single {
				want = tc.line
			}
			if got := d.Match(tc.text); got != want {
				t.Errorf("%q SingleLine=%v: match %v, want %v", tc.text, single, got, want)
			}
		}
	}
}
