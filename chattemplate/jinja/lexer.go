package jinja

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tEOF        tokKind = iota
	tData               // template text
	tVarBegin           // {{
	tVarEnd             // }}
	tBlockBegin         // {%
	tBlockEnd           // %}
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	val  string // text, name, operator or decoded string
	num  Value  // int64 or float64 for numbers
	line int
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tData:
		return "template text"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "'}}'"
	case tBlockBegin:
		return "'{%'"
	case tBlockEnd:
		return "'%}'"
	case tString:
		return strconv.Quote(t.val)
	}
	return "'" + t.val + "'"
}

// lexOptions are the whitespace settings; Hugging Face renders chat
// templates with both on.
type lexOptions struct {
	trimBlocks, lstripBlocks bool
}

// normalizeNewlines does what Jinja does to a template source: every line
// break Python's str.splitlines knows becomes "\n", and one trailing line
// break is dropped (keep_trailing_newline=False).
func normalizeNewlines(src string) string {
	var b strings.Builder
	b.Grow(len(src))
	for i := 0; i < len(src); {
		r, n := utf8.DecodeRuneInString(src[i:])
		switch r {
		case '\r':
			if i+1 < len(src) && src[i+1] == '\n' {
				n = 2
			}
			b.WriteByte('\n')
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			b.WriteByte('\n')
		default:
			b.WriteString(src[i : i+n])
		}
		i += n
	}
	s := b.String()
	return strings.TrimSuffix(s, "\n")
}

// isPySpace is Python's str.isspace for one character.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

type lexer struct {
	src  string
	pos  int
	opts lexOptions
	toks []token
	plus bool // the tag just lexed ended with "+%}"
	// newlines holds the offsets of the line breaks, for line numbers.
	newlines []int
}

func (l *lexer) line(pos int) int { return 1 + sort.SearchInts(l.newlines, pos) }

func (l *lexer) errorf(pos int, format string, args ...any) error {
	return &Error{Line: l.line(pos), Msg: fmt.Sprintf(format, args...)}
}

// lex splits a normalized template source into tokens, applying Jinja's
// whitespace control: "-" on a tag strips all whitespace on that side,
// lstrip_blocks removes spaces and tabs before a block or comment tag that
// starts a line, trim_blocks removes the first newline after one, and "+"
// turns both off for that side.
func lex(src string, opts lexOptions) ([]token, error) {
	l := &lexer{src: src, opts: opts}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			l.newlines = append(l.newlines, i)
		}
	}
	lineStarting := true // the last thing consumed ended a line
	stripNext := false   // the previous tag ended with "-"
	for {
		rest := l.src[l.pos:]
		idx := tagStart(rest)
		var data string
		if idx < 0 {
			data = rest
		} else {
			data = rest[:idx]
		}
		if stripNext {
			data = strings.TrimLeftFunc(data, isPySpace)
			stripNext = false
		}
		if idx < 0 {
			if data != "" {
				l.toks = append(l.toks, token{kind: tData, val: data, line: l.line(l.pos)})
			}
			l.toks = append(l.toks, token{kind: tEOF, line: l.line(len(l.src))})
			return l.toks, nil
		}
		start := l.pos + idx
		kind := l.src[start+1] // '{', '%' or '#'
		mod := byte(0)
		if start+2 < len(l.src) && (l.src[start+2] == '-' || l.src[start+2] == '+') {
			mod = l.src[start+2]
		}
		switch {
		case mod == '-':
			data = strings.TrimRightFunc(data, isPySpace)
		case mod != '+' && l.opts.lstripBlocks && kind != '{':
			lpos := strings.LastIndexByte(data, '\n') + 1
			if (lpos > 0 || lineStarting) && strings.Trim(data[lpos:], " \t") == "" {
				data = data[:lpos]
			}
		}
		if data != "" {
			l.toks = append(l.toks, token{kind: tData, val: data, line: l.line(l.pos)})
		}
		inner := start + 2
		if mod != 0 {
			inner++
		}
		var end int
		var err error
		l.plus = false
		switch kind {
		case '#':
			end, stripNext, err = l.comment(start, inner)
		case '{':
			l.toks = append(l.toks, token{kind: tVarBegin, line: l.line(start)})
			end, stripNext, err = l.expr(inner, "}}", tVarEnd)
		default:
			l.toks = append(l.toks, token{kind: tBlockBegin, line: l.line(start)})
			end, stripNext, err = l.expr(inner, "%}", tBlockEnd)
			if err == nil && l.isRawBlock() {
				end, stripNext, err = l.raw(end, stripNext)
			}
		}
		if err != nil {
			return nil, err
		}
		// trim_blocks: the first newline after a block or comment tag.
		if kind != '{' && !stripNext && l.opts.trimBlocks && !l.plus &&
			end < len(l.src) && l.src[end] == '\n' {
			end++
		}
		lineStarting = end > 0 && l.src[end-1] == '\n'
		l.pos = end
	}
}

// tagStart finds the next "{{", "{%" or "{#".
func tagStart(s string) int {
	off := 0
	for {
		i := strings.IndexByte(s[off:], '{')
		if i < 0 || off+i+1 >= len(s) {
			return -1
		}
		switch s[off+i+1] {
		case '{', '%', '#':
			return off + i
		}
		off += i + 1
	}
}

func (l *lexer) comment(start, inner int) (end int, strip bool, err error) {
	i := strings.Index(l.src[inner:], "#}")
	if i < 0 {
		return 0, false, l.errorf(start, "unclosed comment")
	}
	closeAt := inner + i
	return closeAt + 2, closeAt > inner && l.src[closeAt-1] == '-', nil
}

// isRawBlock reports whether the tokens just lexed are {% raw %}.
func (l *lexer) isRawBlock() bool {
	n := len(l.toks)
	return n >= 3 && l.toks[n-3].kind == tBlockBegin && l.toks[n-2].kind == tName &&
		l.toks[n-2].val == "raw" && l.toks[n-1].kind == tBlockEnd
}

// raw copies everything up to {% endraw %} as text.
func (l *lexer) raw(pos int, strip bool) (int, bool, error) {
	l.toks = l.toks[:len(l.toks)-3]
	for i := pos; ; {
		j := strings.Index(l.src[i:], "{%")
		if j < 0 {
			return 0, false, l.errorf(pos, "missing {%% endraw %%}")
		}
		at := i + j
		k := at + 2
		mod := byte(0)
		if k < len(l.src) && (l.src[k] == '-' || l.src[k] == '+') {
			mod = l.src[k]
			k++
		}
		for k < len(l.src) && isPySpace(rune(l.src[k])) {
			k++
		}
		if !strings.HasPrefix(l.src[k:], "endraw") {
			i = at + 2
			continue
		}
		k += len("endraw")
		for k < len(l.src) && isPySpace(rune(l.src[k])) {
			k++
		}
		stripAfter := false
		if k < len(l.src) && l.src[k] == '-' {
			stripAfter = true
			k++
		} else if k < len(l.src) && l.src[k] == '+' {
			k++
		}
		if !strings.HasPrefix(l.src[k:], "%}") {
			i = at + 2
			continue
		}
		text := l.src[pos:at]
		if strip {
			text = strings.TrimLeftFunc(text, isPySpace)
		}
		if mod == '-' {
			text = strings.TrimRightFunc(text, isPySpace)
		}
		if text != "" {
			l.toks = append(l.toks, token{kind: tData, val: text, line: l.line(pos)})
		}
		return k + 2, stripAfter, nil
	}
}

// ops are the operators, longest first.
var ops = []string{"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
	"(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "=", "<", ">", ";"}

// expr lexes the inside of a {{ }} or {% %} tag up to its closing marker.
func (l *lexer) expr(pos int, closing string, endKind tokKind) (end int, strip bool, err error) {
	depth := 0
	for {
		for pos < len(l.src) && isPySpace(rune(l.src[pos])) {
			pos++
		}
		if pos >= len(l.src) {
			return 0, false, l.errorf(pos, "unexpected end of template, expected %q", closing)
		}
		rest := l.src[pos:]
		if depth == 0 {
			switch {
			case strings.HasPrefix(rest, "-"+closing):
				l.toks = append(l.toks, token{kind: endKind, line: l.line(pos)})
				return pos + 3, true, nil
			case closing == "%}" && strings.HasPrefix(rest, "+%}"):
				l.toks = append(l.toks, token{kind: endKind, line: l.line(pos)})
				l.plus = true
				return pos + 3, false, nil
			case strings.HasPrefix(rest, closing):
				l.toks = append(l.toks, token{kind: endKind, line: l.line(pos)})
				return pos + 2, false, nil
			}
		}
		c := rest[0]
		line := l.line(pos)
		switch {
		case c == '\'' || c == '"':
			s, n, err := l.str(pos)
			if err != nil {
				return 0, false, err
			}
			l.toks = append(l.toks, token{kind: tString, val: s, line: line})
			pos += n
		case c >= '0' && c <= '9':
			tok, n, err := l.number(pos)
			if err != nil {
				return 0, false, err
			}
			tok.line = line
			l.toks = append(l.toks, tok)
			pos += n
		case c == '_' || c >= 0x80 || unicode.IsLetter(rune(c)):
			n := 0
			for n < len(rest) {
				r, w := utf8.DecodeRuneInString(rest[n:])
				if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					break
				}
				n += w
			}
			if n == 0 {
				return 0, false, l.errorf(pos, "unexpected character %q", rest[:1])
			}
			l.toks = append(l.toks, token{kind: tName, val: rest[:n], line: line})
			pos += n
		default:
			op := ""
			for _, o := range ops {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" {
				r, _ := utf8.DecodeRuneInString(rest)
				return 0, false, l.errorf(pos, "unexpected character %q", r)
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
				if depth < 0 {
					return 0, false, l.errorf(pos, "unexpected %q", op)
				}
			}
			l.toks = append(l.toks, token{kind: tOp, val: op, line: line})
			pos += len(op)
		}
	}
}

// str lexes a quoted string literal with Python escapes.
func (l *lexer) str(pos int) (string, int, error) {
	q := l.src[pos]
	var b strings.Builder
	i := pos + 1
	for i < len(l.src) {
		c := l.src[i]
		switch {
		case c == q:
			return b.String(), i + 1 - pos, nil
		case c == '\\' && i+1 < len(l.src):
			i++
			e := l.src[i]
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'a':
				b.WriteByte(7)
			case 'b':
				b.WriteByte(8)
			case 'f':
				b.WriteByte(12)
			case 'v':
				b.WriteByte(11)
			case '0':
				b.WriteByte(0)
			case '\n':
				// line continuation
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if i+n >= len(l.src) {
					return "", 0, l.errorf(pos, "truncated \\%c escape", e)
				}
				v, err := strconv.ParseUint(l.src[i+1:i+1+n], 16, 32)
				if err != nil || v > unicode.MaxRune {
					return "", 0, l.errorf(pos, "invalid \\%c escape", e)
				}
				b.WriteRune(rune(v))
				i += n
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
	return "", 0, l.errorf(pos, "unterminated string")
}

func (l *lexer) number(pos int) (token, int, error) {
	rest := l.src[pos:]
	digits := func(i int) int {
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '_' && i+1 < len(rest) && rest[i+1] >= '0' && rest[i+1] <= '9') {
			i++
		}
		return i
	}
	n := digits(0)
	isFloat := false
	if n+1 < len(rest) && rest[n] == '.' && rest[n+1] >= '0' && rest[n+1] <= '9' {
		n = digits(n + 1)
		isFloat = true
	}
	if n < len(rest) && (rest[n] == 'e' || rest[n] == 'E') {
		m := n + 1
		if m < len(rest) && (rest[m] == '+' || rest[m] == '-') {
			m++
		}
		if m < len(rest) && rest[m] >= '0' && rest[m] <= '9' {
			n = digits(m)
			isFloat = true
		}
	}
	text := strings.ReplaceAll(rest[:n], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return token{}, 0, l.errorf(pos, "invalid number %q", rest[:n])
		}
		return token{kind: tFloat, val: rest[:n], num: f}, n, nil
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return token{}, 0, l.errorf(pos, "integer %q out of range", rest[:n])
	}
	return token{kind: tInt, val: rest[:n], num: v}, n, nil
}
