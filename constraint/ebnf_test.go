package constraint

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// SGLang's EBNF test grammars and a few recursive ones, with texts each
// must accept and refuse.
var ebnfCases = []struct {
	name    string
	src     string
	regular bool
	accept  []string
	reject  []string
}{
	{"literal", `root ::= "user@example.com"`, true,
		[]string{"user@example.com"}, []string{"", "user@example.co", "user@example.comm"}},
	{"greeting", `root ::= "Hello" | "Hi" | "Hey"`, true,
		[]string{"Hello", "Hi", "Hey"}, []string{"H", "Hello!", "hey"}},
	{"number", "\n        root ::= digit digit digit\n        digit ::= [0-9]\n        ", true,
		[]string{"123", "000"}, []string{"12", "1234", "12a"}},
	{"phone", `
		root ::= "(" area ")" " " prefix "-" line
		area ::= [0-9] [0-9] [0-9]
		prefix ::= [0-9] [0-9] [0-9]
		line ::= [0-9] [0-9] [0-9] [0-9]`, true,
		[]string{"(555) 123-4567"}, []string{"555-123-4567", "(555) 123-456"}},
	{"date", `
		root ::= year "-" month "-" day
		year ::= "2024"
		month ::= "01" | "02" | "03" | "04" | "05" | "06" | "07" | "08" | "09" | "10" | "11" | "12"
		day ::= "01" | "02" | "03" | "04" | "05" | "06" | "07" | "08" | "09" | "10" |
		       "11" | "12" | "13" | "14" | "15" | "16" | "17" | "18" | "19" | "20" |
		       "21" | "22" | "23" | "24" | "25" | "26" | "27" | "28" | "29" | "30" | "31"`, true,
		[]string{"2024-01-31", "2024-12-01"}, []string{"2024-13-01", "2024-01-32", "2023-01-01"}},
	{"hex color", `
		root ::= "#" hex hex hex hex hex hex
		hex ::= [0-9] | [A-F]`, true,
		[]string{"#00FFAB"}, []string{"#00ffab", "#00FFA"}},
	{"json-like", `
		root ::= object
		object ::= "{" ws pair (ws "," ws pair)* ws "}"
		pair ::= "\"name\"" ws ":" ws value |
		         "\"age\"" ws ":" ws number |
		         "\"city\"" ws ":" ws string
		value ::= string | number
		string ::= "\"" [a-zA-Z0-9 ]+ "\""
		number ::= [1-9] [0-9]*
		ws ::= [ ]*`, true,
		[]string{`{"name": "Al", "age": 30, "city": "Rome"}`, `{"age":1}`},
		[]string{`{}`, `{"age": 0}`, `{"name": "A"`, `{"name": ""}`}},
	{"log", `
		root ::= logentry
		logentry ::= "[" datetime "] " level ": System.process - " message
		datetime ::= "2024-01-01T12:00:00Z"
		level ::= "INFO"
		message ::= "Operation " [a-z]+ " successfully"`, true,
		[]string{"[2024-01-01T12:00:00Z] INFO: System.process - Operation done successfully"},
		[]string{"[2024-01-01T12:00:00Z] INFO: System.process - Operation  successfully"}},
	{"repeat bounds", `root ::= [a-c]{2,3} "-" "x"{2} "y"{1,} # trailing comment`, true,
		[]string{"ab-xxy", "abc-xxyyy"}, []string{"a-xxy", "abcd-xxy", "ab-xy", "ab-xx"}},
	{"escapes and negation", `root ::= "\x41\u00e9" [^"\\\n]* "\t"`, true,
		[]string{"Aé\t", "Aéxyz é\t"}, []string{"Aé\"\t", "Ae\t", "Aé\n\t"}},
	{"any char and optional", `root ::= "<" . "> " ("ok" | "no")?`, true,
		[]string{"<x> ", "<€> ok", "<>> no"}, []string{"<> ", "<xy> ", "<x> maybe"}},
	{"balanced parens", `
		root ::= group+
		group ::= "(" group* ")"`, false,
		[]string{"()", "(())()", "((()())())"}, []string{"", "(", "())", ")("}},
	{"nested arrays", `
		root ::= value
		value ::= "[" ws (value (ws "," ws value)*)? ws "]" | [0-9]+
		ws ::= " "?`, false,
		[]string{"[]", "[1, [2,3], [[]]]", "42"}, []string{"[1,]", "[[1]", "[ 1 , ]"}},
	{"left recursion", `
		root ::= expr
		expr ::= expr "+" term | term
		term ::= [0-9] | "(" expr ")"`, false,
		[]string{"1", "1+2+3", "(1+2)+3", "((4))"}, []string{"+1", "1+", "(1+2", "12"}},
	{"nullable recursion", `
		root ::= a "end"
		a ::= "" | "x" a b
		b ::= "y"?`, false,
		[]string{"end", "xend", "xxyend", "xxyyend"}, []string{"yend", "xen", "xyxend"}},
}

func TestEBNFAcceptsAndRejects(t *testing.T) {
	for _, tc := range ebnfCases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ParseEBNF(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if g.Regular() != tc.regular {
				t.Fatalf("Regular() = %v, want %v", g.Regular(), tc.regular)
			}
			var d *DFA
			if tc.regular {
				if d, err = g.DFA(); err != nil {
					t.Fatal(err)
				}
			} else if _, err := g.DFA(); !errors.Is(err, ErrNotRegular) {
				t.Fatalf("DFA of a recursive grammar: %v, want ErrNotRegular", err)
			}
			check := func(s string, want bool) {
				if got := g.Match(s); got != want {
					t.Errorf("Earley Match(%q) = %v, want %v", s, got, want)
				}
				if d != nil && d.Match(s) != want {
					t.Errorf("DFA Match(%q) = %v, want %v", s, !want, want)
				}
			}
			for _, s := range tc.accept {
				check(s, true)
			}
			for _, s := range tc.reject {
				check(s, false)
			}
		})
	}
}

func TestEBNFErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{``, "no root rule"},
		{`start ::= "a"`, "no root rule"},
		{`root ::= a`, `undefined rule "a"`},
		{`root ::= "a`, "unterminated string"},
		{`root ::= "\q"`, `unknown escape \q`},
		{`root ::= [a-`, "unterminated character class"},
		{`root ::= [z-a]`, "reversed"},
		{`root ::= "a"{3,2}`, "below the minimum"},
		{`root ::= "a"{5000}`, "over 1000"},
		{`root ::= ("a"`, "expected )"},
		{`root ::= "a" (= "b")`, "lookahead"},
		{`root ::= "a" @`, "unexpected"},
		{`root ::= "a"` + "\nroot ::= \"b\"", "defined twice"},
		{`root ::= a` + "\na ::= \"x\" a", "matches nothing"},
		{`root ::= [^\x00-\U0010FFFF]`, "matches no character"},
		{"root ::= \"\xff\"", "not valid UTF-8"},
		{`"a" ::= root`, "expected a rule name"},
		{`root "a"`, "expected ::="},
	} {
		_, err := ParseEBNF(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseEBNF(%q): %v, want an error containing %q", tc.src, err, tc.want)
		}
	}
}

// TestEBNFErrorPosition: errors name the line and column.
func TestEBNFErrorPosition(t *testing.T) {
	_, err := ParseEBNF("root ::= a\na ::= \"x\" $")
	var ee *EBNFError
	if !errors.As(err, &ee) || ee.Line != 2 || ee.Col != 11 {
		t.Fatalf("error %v, want line 2 column 11", err)
	}
}

// TestEBNFMasks: for a recursive grammar on the Qwen3 vocabulary, the
// context-free constraint's masks equal parsing every token's bytes, and
// random walks under the masks end in full matches.
func TestEBNFMasks(t *testing.T) {
	v := loadQwen3(t)
	src := `
		root ::= value
		value ::= "[" (value ("," value)*)? "]" | "\"" [a-z]* "\"" | [0-9]+`
	g, err := CompileEBNF(src, v)
	if err != nil {
		t.Fatal(err)
	}
	if g.cfg == nil {
		t.Fatal("a recursive grammar compiled to a DFA")
	}
	e, _ := ParseEBNF(src)
	c := g.NewConstraint()
	for _, prefix := range []string{"", "[", "[12", `["ab`, "[[", "[1,[]"} {
		c = g.NewConstraint()
		for i := 0; i < len(prefix); i++ {
			if !c.cp.e.step(prefix[i]) {
				t.Fatalf("prefix %q refused", prefix)
			}
		}
		m := v.cfgMask(c.cp.e)
		p := c.cp.e
		for id := range int32(v.Size()) {
			want := false
			if v.isEOS(id) {
				want = e.Match(prefix)
			} else if b, ok := v.tok.TokenBytes(id); ok && len(b) > 0 && !v.tok.IsSpecial(id) {
				n := p.cols()
				want = true
				for _, ch := range b {
					if !p.step(ch) {
						want = false
						break
					}
				}
				p.truncate(n)
			}
			if got := m[id>>6]>>(id&63)&1 != 0; got != want {
				t.Fatalf("prefix %q token %d: mask %v, parse %v", prefix, id, got, want)
			}
		}
	}
	// Walks: random allowed tokens, checked by Allow, ending on EOS.
	rng := rand.New(rand.NewPCG(1, 2))
	done := 0
	for range 20 {
		c := g.NewConstraint()
		var out []byte
		for step := 0; step < 60; step++ {
			if c.Allow(qwen3EOS[0]) && (step > 20 || rng.IntN(3) == 0) {
				done++
				if !e.Match(string(out)) || !c.Complete() {
					t.Fatalf("walk ended on %q, not a match", out)
				}
				break
			}
			m := c.Mask()
			if m == nil {
				m = v.cfgMask(c.cp.e)
			}
			var allowed []int32
			for id := range int32(v.Size()) {
				if m[id>>6]>>(id&63)&1 != 0 && !v.isEOS(id) {
					allowed = append(allowed, id)
				}
			}
			if len(allowed) == 0 {
				t.Fatalf("no token allowed after %q", out)
			}
			tok := allowed[rng.IntN(len(allowed))]
			if step > 30 { // steer to an end: closing tokens first
				for _, id := range allowed {
					if b, _ := v.tok.TokenBytes(id); string(b) == "]" || string(b) == `"` {
						tok = id
					}
				}
			}
			if !c.Allow(tok) {
				t.Fatalf("mask allows %d after %q, Allow refuses", tok, out)
			}
			b, _ := v.tok.TokenBytes(tok)
			out = append(out, b...)
			c.Advance(tok)
			if c.State() < 0 {
				t.Fatalf("state lost after %q", out)
			}
		}
	}
	if done == 0 {
		t.Error("no walk ended")
	}
}

// TestEBNFRegularUsesDFA: a regular grammar's Grammar is a DFA one.
func TestEBNFRegularUsesDFA(t *testing.T) {
	v := loadQwen3(t)
	g, err := CompileEBNF(`root ::= "Hello" | "Hi"`, v)
	if err != nil {
		t.Fatal(err)
	}
	if g.DFA() == nil || !g.DFA().Match("Hi") {
		t.Fatal("regular grammar did not compile to its DFA")
	}
}
