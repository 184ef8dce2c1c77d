package constraint

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzCompileRegex: never a panic; a compiled DFA stays within MaxStates
// and agrees with Go's regexp on full matches of valid UTF-8.
func FuzzCompileRegex(f *testing.F) {
	for _, s := range []string{`a+b*`, `^\d{3}-\d{4}$`, `(?i)héllo|wörld`, `[^"\\]*`, `(a|b)*a(a|b){3}`, `.{2,5}`, `\p{L}+\s?`, `a\bb`, `x{1000}`} {
		f.Add(s, "abc")
	}
	f.Fuzz(func(t *testing.T, expr, input string) {
		if len(expr) > 200 {
			return
		}
		t0 := time.Now()
		d, err := CompileRegex(expr)
		if el := time.Since(t0); el > 3*time.Second {
			t.Fatalf("compiling took %v", el)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if d.NumStates() > MaxStates {
			t.Fatalf("%d states", d.NumStates())
		}
		if !utf8.ValidString(input) || strings.ContainsAny(expr, "^$") {
			return
		}
		re, err := regexp.Compile(`^(?:` + expr + `)$`)
		if err != nil {
			return
		}
		if got, want := d.Match(input), re.MatchString(input); got != want {
			t.Fatalf("%q on %q: DFA %v, regexp %v", expr, input, got, want)
		}
	})
}

// FuzzCompileSchema: never a panic; either a clear error or a DFA within
// MaxStates.
func FuzzCompileSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":"string","maxLength":5},"b":{"type":"array","items":{"type":"integer","minimum":-3,"maximum":40}}},"required":["a"]}`,
		`{"anyOf":[{"type":"null"},{"$ref":"#/$defs/x"}],"$defs":{"x":{"enum":[1,"two",[3]]}}}`,
		`{"type":["string","number"],"pattern":"^a.c$"}`,
		`{"$ref":"#"}`,
		`{}`, `true`, `false`, `[]`, `{"type":"array","minItems":3,"maxItems":2}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, schema []byte, strict bool) {
		if len(schema) > 2000 {
			return
		}
		t0 := time.Now()
		d, err := CompileSchema(schema, SchemaOptions{Strict: strict})
		if el := time.Since(t0); el > 3*time.Second {
			t.Fatalf("compiling took %v", el)
		}
		if err != nil {
			var se *SchemaError
			if !errors.As(err, &se) && !errors.Is(err, ErrTooLarge) && !strings.HasPrefix(err.Error(), "json_schema") {
				t.Fatalf("unlabelled error %v", err)
			}
			return
		}
		if d.NumStates() > MaxStates {
			t.Fatalf("%d states", d.NumStates())
		}
	})
}

// FuzzParseEBNF: never a panic; a grammar either parses or fails with an
// error naming "ebnf"; a parsed regular grammar's DFA agrees with the
// Earley recognizer on the input.
func FuzzParseEBNF(f *testing.F) {
	for _, s := range []string{
		`root ::= "a" | "b"`,
		"root ::= digit{3}\ndigit ::= [0-9]",
		`root ::= "(" root ")" | ""`,
		`root ::= [^"\\]* "\x41" .`,
		`root ::= a+ b? # c` + "\na ::= \"x\"\nb ::= (a | \"y\")*",
		`root ::= expr` + "\nexpr ::= expr \"+\" [0-9] | [0-9]",
		`root ::= "a"{2,5}`, `root ::= (= "a")`, `root`, `::=`,
	} {
		f.Add(s, "a")
	}
	f.Fuzz(func(t *testing.T, src, input string) {
		if len(src) > 300 || len(input) > 64 {
			return
		}
		t0 := time.Now()
		g, err := ParseEBNF(src)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ebnf") {
				t.Fatalf("unlabelled error %v", err)
			}
			return
		}
		match := g.Match(input)
		if g.Regular() {
			d, err := g.DFA()
			if err != nil {
				if !errors.Is(err, ErrTooLarge) {
					t.Fatalf("DFA of a regular grammar: %v", err)
				}
				return
			}
			if d.Match(input) != match {
				t.Fatalf("%q on %q: DFA %v, Earley %v", src, input, !match, match)
			}
		}
		if el := time.Since(t0); el > 3*time.Second {
			t.Fatalf("took %v", el)
		}
	})
}
