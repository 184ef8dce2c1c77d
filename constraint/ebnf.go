package constraint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// EBNF grammars as SGLang takes them (sampling_params.ebnf, xgrammar's
// GBNF-like dialect):
//
//	root  ::= "(" area ") " digits      # the start rule is root
//	area  ::= [0-9] [0-9] [0-9]
//	digits ::= [0-9]+ ("-" [0-9]{4})?
//
// A rule is `name ::= expression`; an expression is alternatives (|) of
// sequences of string literals ("..." with \n \t \r \\ \" \xHH \uHHHH
// escapes), character classes ([a-z], [^"\\]), `.` (any character), rule
// names and parenthesized groups, each optionally repeated by *, +, ? or
// {m}, {m,}, {m,n}. `#` starts a comment; rules may span lines. Lookahead
// assertions (xgrammar's `(= ...)`) are refused.

// maxEBNFLen bounds a grammar's source.
const maxEBNFLen = 1 << 16

// maxEBNFDepth bounds the nesting of groups.
const maxEBNFDepth = 64

// ErrNotRegular reports an EBNF grammar whose rules refer back to
// themselves, which EBNF.DFA cannot compile.
var ErrNotRegular = errors.New("the grammar is recursive (not a regular language)")

type exprKind uint8

const (
	eLit    exprKind = iota // lit
	eClass                  // ranges (rune pairs)
	eRef                    // name
	eSeq                    // subs in order
	eAlt                    // one of subs
	eRepeat                 // subs[0] min..max times (max < 0: unbounded)
)

type expr struct {
	kind     exprKind
	lit      string
	ranges   []rune
	name     string
	subs     []*expr
	min, max int
}

// EBNF is a parsed and checked grammar.
type EBNF struct {
	rules map[string]*expr
	order []string // rules in source order
	// recursive reports a rule reachable from root that refers to itself.
	recursive bool
}

// EBNFError is a grammar the parser refuses, with the line and column
// (1-based) where it went wrong.
type EBNFError struct {
	Line, Col int
	Msg       string
}

func (e *EBNFError) Error() string {
	return fmt.Sprintf("ebnf: line %d column %d: %s", e.Line, e.Col, e.Msg)
}

type ebnfParser struct {
	src   string
	pos   int
	depth int
}

func (p *ebnfParser) errf(format string, args ...any) error {
	line, col := 1, 1
	for _, r := range p.src[:min(p.pos, len(p.src))] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return &EBNFError{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

// skip passes whitespace and comments.
func (p *ebnfParser) skip() {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// name reads a rule name at pos ("" if none).
func (p *ebnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// atRuleStart reports whether a `name ::=` starts at pos.
func (p *ebnfParser) atRuleStart() bool {
	save := p.pos
	defer func() { p.pos = save }()
	if p.name() == "" {
		return false
	}
	p.skip()
	return strings.HasPrefix(p.src[p.pos:], "::=")
}

// ParseEBNF parses src and checks it: a root rule, every referenced rule
// defined once, no rule that can match nothing.
func ParseEBNF(src string) (*EBNF, error) {
	if len(src) > maxEBNFLen {
		return nil, fmt.Errorf("ebnf: the grammar is %d bytes, over the limit %d", len(src), maxEBNFLen)
	}
	if !utf8.ValidString(src) {
		return nil, errors.New("ebnf: the grammar is not valid UTF-8")
	}
	p := &ebnfParser{src: src}
	g := &EBNF{rules: map[string]*expr{}}
	for {
		p.skip()
		if p.pos >= len(src) {
			break
		}
		name := p.name()
		if name == "" {
			return nil, p.errf("expected a rule name, found %q", p.peekText())
		}
		p.skip()
		if !strings.HasPrefix(src[p.pos:], "::=") {
			return nil, p.errf("expected ::= after rule name %q", name)
		}
		if _, dup := g.rules[name]; dup {
			return nil, p.errf("rule %q is defined twice", name)
		}
		p.pos += 3
		e, err := p.alt()
		if err != nil {
			return nil, err
		}
		g.rules[name] = e
		g.order = append(g.order, name)
	}
	if _, ok := g.rules["root"]; !ok {
		return nil, errors.New("ebnf: the grammar has no root rule (root ::= ...)")
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	return g, nil
}

func (p *ebnfParser) peekText() string {
	end := min(p.pos+12, len(p.src))
	return p.src[p.pos:end]
}

func (p *ebnfParser) alt() (*expr, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxEBNFDepth {
		return nil, p.errf("groups nest deeper than %d", maxEBNFDepth)
	}
	var alts []*expr
	for {
		s, err := p.seq()
		if err != nil {
			return nil, err
		}
		alts = append(alts, s)
		p.skip()
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			continue
		}
		break
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &expr{kind: eAlt, subs: alts}, nil
}

func (p *ebnfParser) seq() (*expr, error) {
	var items []*expr
	for {
		p.skip()
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		if c == '|' || c == ')' || isNameByte(c) && p.atRuleStart() {
			break
		}
		e, err := p.postfix()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if len(items) == 1 {
		return items[0], nil
	}
	return &expr{kind: eSeq, subs: items}, nil
}

func (p *ebnfParser) postfix() (*expr, error) {
	e, err := p.primary()
	if err != nil {
		return nil, err
	}
	for p.pos < len(p.src) {
		lo, hi := 0, 0
		switch p.src[p.pos] {
		case '*':
			lo, hi = 0, -1
		case '+':
			lo, hi = 1, -1
		case '?':
			lo, hi = 0, 1
		case '{':
			p.pos++
			lo, hi, err = p.bounds()
			if err != nil {
				return nil, err
			}
			p.pos-- // bounds stops on '}'
		default:
			return e, nil
		}
		p.pos++
		e = &expr{kind: eRepeat, subs: []*expr{e}, min: lo, max: hi}
	}
	return e, nil
}

// bounds reads m}, m,} or m,n} after '{'.
func (p *ebnfParser) bounds() (lo, hi int, err error) {
	num := func() (int, bool) {
		p.skip()
		start := p.pos
		for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.pos++
		}
		if start == p.pos {
			return 0, false
		}
		n, err := strconv.Atoi(p.src[start:p.pos])
		if err != nil || n > maxRepeat {
			return maxRepeat + 1, true
		}
		return n, true
	}
	lo, ok := num()
	if !ok {
		return 0, 0, p.errf("expected a number in {m,n}")
	}
	hi = lo
	p.skip()
	if p.pos < len(p.src) && p.src[p.pos] == ',' {
		p.pos++
		if n, ok := num(); ok {
			hi = n
		} else {
			hi = -1
		}
		p.skip()
	}
	if p.pos >= len(p.src) || p.src[p.pos] != '}' {
		return 0, 0, p.errf("expected } to close {m,n}")
	}
	p.pos++
	if lo > maxRepeat || hi > maxRepeat {
		return 0, 0, p.errf("repetition bounds over %d", maxRepeat)
	}
	if hi >= 0 && hi < lo {
		return 0, 0, p.errf("repetition {%d,%d}: the maximum is below the minimum", lo, hi)
	}
	return lo, hi, nil
}

func (p *ebnfParser) primary() (*expr, error) {
	c := p.src[p.pos]
	switch {
	case c == '"' || c == '\'':
		return p.literal(c)
	case c == '[':
		return p.class()
	case c == '.':
		p.pos++
		return &expr{kind: eClass, ranges: []rune{0, utf8.MaxRune}}, nil
	case c == '(':
		p.pos++
		p.skip()
		if p.pos < len(p.src) && p.src[p.pos] == '=' {
			return nil, p.errf("lookahead assertions (= ...) are not supported")
		}
		e, err := p.alt()
		if err != nil {
			return nil, err
		}
		p.skip()
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, p.errf("expected ) to close a group")
		}
		p.pos++
		return e, nil
	case isNameByte(c):
		return &expr{kind: eRef, name: p.name()}, nil
	}
	return nil, p.errf("unexpected %q", p.peekText())
}

// escape reads an escape after '\' and returns its rune.
func (p *ebnfParser) escape() (rune, error) {
	if p.pos >= len(p.src) {
		return 0, p.errf("unfinished escape")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 'n':
		return '\n', nil
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'f':
		return '\f', nil
	case 'v':
		return '\v', nil
	case 'b':
		return '\b', nil
	case '0':
		return 0, nil
	case '\\', '"', '\'', '[', ']', '-', '/', '^', '.', '(', ')', '|', '*', '+', '?', '{', '}':
		return rune(c), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if p.pos+n > len(p.src) {
			return 0, p.errf("\\%c needs %d hex digits", c, n)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, p.errf("\\%c%s is not a valid code point", c, p.src[p.pos:p.pos+n])
		}
		p.pos += n
		return rune(v), nil
	}
	p.pos--
	return 0, p.errf("unknown escape \\%c", c)
}

func (p *ebnfParser) literal(quote byte) (*expr, error) {
	p.pos++
	var b strings.Builder
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return nil, p.errf("unterminated string literal")
		}
		c := p.src[p.pos]
		if c == quote {
			p.pos++
			return &expr{kind: eLit, lit: b.String()}, nil
		}
		if c == '\\' {
			p.pos++
			r, err := p.escape()
			if err != nil {
				return nil, err
			}
			b.WriteRune(r)
			continue
		}
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		b.WriteRune(r)
		p.pos += n
	}
}

func (p *ebnfParser) class() (*expr, error) {
	p.pos++
	neg := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		neg = true
		p.pos++
	}
	char := func() (rune, error) {
		if p.pos >= len(p.src) {
			return 0, p.errf("unterminated character class")
		}
		if p.src[p.pos] == '\\' {
			p.pos++
			return p.escape()
		}
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += n
		return r, nil
	}
	var ranges []rune
	for {
		if p.pos >= len(p.src) {
			return nil, p.errf("unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errf("character range %q-%q is reversed", lo, hi)
			}
		}
		ranges = append(ranges, lo, hi)
	}
	ranges = normalizeRanges(ranges)
	if neg {
		ranges = negateRanges(ranges)
	}
	if len(ranges) == 0 {
		return nil, p.errf("the character class matches no character")
	}
	return &expr{kind: eClass, ranges: ranges}, nil
}

// normalizeRanges sorts and merges rune range pairs.
func normalizeRanges(r []rune) []rune {
	type pair struct{ lo, hi rune }
	ps := make([]pair, 0, len(r)/2)
	for i := 0; i+1 < len(r); i += 2 {
		ps = append(ps, pair{r[i], r[i+1]})
	}
	for i := 1; i < len(ps); i++ { // insertion sort: classes are short
		for j := i; j > 0 && ps[j].lo < ps[j-1].lo; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
	var out []rune
	for _, q := range ps {
		if n := len(out); n > 0 && q.lo <= out[n-1]+1 {
			out[n-1] = max(out[n-1], q.hi)
			continue
		}
		out = append(out, q.lo, q.hi)
	}
	return out
}

// negateRanges is the complement of sorted, merged ranges in [0, MaxRune].
func negateRanges(r []rune) []rune {
	var out []rune
	next := rune(0)
	for i := 0; i+1 < len(r); i += 2 {
		if r[i] > next {
			out = append(out, next, r[i]-1)
		}
		next = r[i+1] + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, next, utf8.MaxRune)
	}
	return out
}

// check resolves references, finds recursion among the rules reachable
// from root and refuses a grammar that matches nothing.
func (g *EBNF) check() error {
	var undefined error
	var walk func(e *expr, f func(string))
	walk = func(e *expr, f func(string)) {
		if e.kind == eRef {
			f(e.name)
		}
		for _, s := range e.subs {
			walk(s, f)
		}
	}
	// Depth-first search from root with colors for cycles.
	color := map[string]int{}
	var visit func(name string)
	visit = func(name string) {
		color[name] = 1
		walk(g.rules[name], func(ref string) {
			if _, ok := g.rules[ref]; !ok {
				if undefined == nil {
					undefined = fmt.Errorf("ebnf: rule %q refers to undefined rule %q", name, ref)
				}
				return
			}
			switch color[ref] {
			case 0:
				visit(ref)
			case 1:
				g.recursive = true
			}
		})
		color[name] = 2
	}
	visit("root")
	if undefined != nil {
		return undefined
	}
	// Productive rules: those that derive some string (fixed point).
	productive := map[string]bool{}
	var prod func(e *expr) bool
	prod = func(e *expr) bool {
		switch e.kind {
		case eLit, eClass:
			return true
		case eRef:
			return productive[e.name]
		case eSeq:
			for _, s := range e.subs {
				if !prod(s) {
					return false
				}
			}
			return true
		case eAlt:
			for _, s := range e.subs {
				if prod(s) {
					return true
				}
			}
			return false
		case eRepeat:
			return e.min == 0 || prod(e.subs[0])
		}
		return false
	}
	for changed := true; changed; {
		changed = false
		for _, name := range g.order {
			if !productive[name] && prod(g.rules[name]) {
				productive[name] = true
				changed = true
			}
		}
	}
	if !productive["root"] {
		return errors.New("ebnf: the grammar matches nothing (its rules never end)")
	}
	return nil
}

// Regular reports whether no rule reachable from root refers back to
// itself, so that the grammar compiles to a DFA.
func (g *EBNF) Regular() bool { return !g.recursive }

// DFA compiles a regular grammar to a DFA (ErrNotRegular for a recursive
// one; ErrTooLarge past the automaton limits).
func (g *EBNF) DFA() (*DFA, error) {
	if g.recursive {
		return nil, ErrNotRegular
	}
	b := &builder{}
	f := g.frag(b, g.rules["root"])
	d, err := b.finish(f)
	if err != nil {
		return nil, fmt.Errorf("ebnf: %w", err)
	}
	return d, nil
}

// frag builds e (references inlined) into b.
func (g *EBNF) frag(b *builder, e *expr) frag {
	if b.err != nil {
		return frag{}
	}
	switch e.kind {
	case eLit:
		return b.lit(e.lit)
	case eClass:
		return b.runes(e.ranges)
	case eRef:
		return g.frag(b, g.rules[e.name])
	case eSeq:
		fs := make([]frag, len(e.subs))
		for i, s := range e.subs {
			fs[i] = g.frag(b, s)
		}
		return b.cat(fs...)
	case eAlt:
		fs := make([]frag, len(e.subs))
		for i, s := range e.subs {
			fs[i] = g.frag(b, s)
		}
		return b.alt(fs...)
	case eRepeat:
		return b.repeat(func() frag { return g.frag(b, e.subs[0]) }, e.min, e.max)
	}
	return b.empty()
}

// CompileEBNF compiles an EBNF grammar for vocabulary v: a regular one to a
// DFA (token masks cached per state), a recursive one (or one whose DFA
// passes the limits) to an Earley recognizer over bytes.
func CompileEBNF(src string, v *Vocab) (*Grammar, error) {
	g, err := ParseEBNF(src)
	if err != nil {
		return nil, err
	}
	if g.Regular() {
		d, err := g.DFA()
		if err == nil {
			return NewGrammar(d, v), nil
		}
		if !errors.Is(err, ErrTooLarge) {
			return nil, err
		}
	}
	c, err := g.cfg()
	if err != nil {
		return nil, err
	}
	return &Grammar{cfg: c, vocab: v}, nil
}
