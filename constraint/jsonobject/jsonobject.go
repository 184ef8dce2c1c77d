// Package jsonobject is the part of package constraint that keeps
// generated text a valid JSON object, for response_format {"type":
// "json_object"}: no schema, so no regular language, but a byte-level
// pushdown automaton. A token is allowed when its bytes keep the output a
// prefix of some JSON object, and the end-of-sequence token only once the
// object is complete. Constraint implements engine.Constraint.
package jsonobject

// Vocab gives the bytes of each token.
type Vocab interface {
	TokenBytes(id int32) ([]byte, bool)
	IsSpecial(id int32) bool
}

type state uint8

const (
	sStart    state = iota // before the top-level object
	sObjFirst              // after '{': key or '}'
	sObjKey                // after ',' in an object: key
	sColon                 // after a key: ':'
	sValue                 // a value
	sArrFirst              // after '[': value or ']'
	sAfter                 // after a value: ',' or a closing bracket
	sString                // inside a string
	sEscape                // after a backslash
	sUnicode               // inside \uXXXX
	sNumMinus              // after '-'
	sNumZero               // a leading 0
	sNumInt                // integer digits
	sNumDot                // after '.'
	sNumFrac               // fraction digits
	sNumE                  // after 'e'
	sNumESign              // after the exponent's sign
	sNumExp                // exponent digits
	sLiteral               // inside true/false/null
	sDone                  // the top-level object closed
)

// maxSpace bounds runs of whitespace outside strings, so that a model
// cannot pad forever; after the object, at most trailingSpace bytes.
const (
	maxSpace      = 16
	trailingSpace = 1
	maxDepth      = 64
)

// automaton is the parser state; it is small and copied freely.
type automaton struct {
	st      state
	key     bool   // the string being read is an object key
	hex     uint8  // hex digits left in \u
	lit     string // rest of the literal being read
	spaces  uint8
	depth   uint8
	stack   [maxDepth]byte // '{' or '['
	invalid bool
}

// Constraint is one request's JSON state.
type Constraint struct {
	v   Vocab
	eos map[int32]bool
	a   automaton
}

// New starts a constraint; eos lists the tokens that end a sequence.
func New(v Vocab, eos []int32) *Constraint {
	c := &Constraint{v: v, eos: map[int32]bool{}}
	for _, t := range eos {
		c.eos[t] = true
	}
	return c
}

// Complete reports whether the output so far is a whole JSON object.
func (c *Constraint) Complete() bool { return c.a.st == sDone }

// Allow reports whether token t may come next.
func (c *Constraint) Allow(t int32) bool {
	if c.eos[t] {
		return c.a.st == sDone
	}
	if c.v.IsSpecial(t) {
		return false
	}
	b, ok := c.v.TokenBytes(t)
	if !ok || len(b) == 0 {
		return false
	}
	a := c.a
	for _, ch := range b {
		if !a.step(ch) {
			return false
		}
	}
	return true
}

// Advance records token t.
func (c *Constraint) Advance(t int32) {
	if c.eos[t] {
		return
	}
	b, _ := c.v.TokenBytes(t)
	for _, ch := range b {
		if !c.a.step(ch) {
			c.a.invalid = true
			return
		}
	}
}

// Valid reports whether s is a prefix of a JSON object (complete reports
// whether it is a whole one). It is the automaton without tokens, for tests.
func Valid(s string) (prefix, complete bool) {
	var a automaton
	for i := 0; i < len(s); i++ {
		if !a.step(s[i]) {
			return false, false
		}
	}
	return true, a.st == sDone
}

func isSpace(ch byte) bool { return ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r' }

func isDigit(ch byte) bool { return ch >= '0' && ch <= '9' }

func isHex(ch byte) bool { return isDigit(ch) || ch >= 'a' && ch <= 'f' || ch >= 'A' && ch <= 'F' }

// endValue moves to the state after a value.
func (a *automaton) endValue() {
	if a.depth == 0 {
		a.st = sDone
	} else {
		a.st = sAfter
	}
	a.spaces = 0
}

// space accepts whitespace in structural states.
func (a *automaton) space(ch byte) bool {
	limit := uint8(maxSpace)
	if a.st == sDone {
		limit = trailingSpace
	}
	if a.spaces >= limit {
		return false
	}
	a.spaces++
	return true
}

func (a *automaton) push(ch byte) bool {
	if int(a.depth) >= maxDepth {
		return false
	}
	a.stack[a.depth] = ch
	a.depth++
	a.spaces = 0
	return true
}

func (a *automaton) pop(ch byte) bool {
	if a.depth == 0 || a.stack[a.depth-1] != ch {
		return false
	}
	a.depth--
	a.endValue()
	return true
}

// startValue begins a value with ch.
func (a *automaton) startValue(ch byte) bool {
	a.spaces = 0
	switch {
	case ch == '{':
		a.st = sObjFirst
		return a.push('{')
	case ch == '[':
		a.st = sArrFirst
		return a.push('[')
	case ch == '"':
		a.st, a.key = sString, false
	case ch == '-':
		a.st = sNumMinus
	case ch == '0':
		a.st = sNumZero
	case isDigit(ch):
		a.st = sNumInt
	case ch == 't':
		a.st, a.lit = sLiteral, "rue"
	case ch == 'f':
		a.st, a.lit = sLiteral, "alse"
	case ch == 'n':
		a.st, a.lit = sLiteral, "ull"
	default:
		return false
	}
	return true
}

// afterNumber handles the byte that ends a number.
func (a *automaton) afterNumber(ch byte) bool {
	a.endValue()
	return a.step(ch)
}

func (a *automaton) step(ch byte) bool {
	if a.invalid {
		return false
	}
	switch a.st {
	case sStart:
		if isSpace(ch) {
			return a.space(ch)
		}
		if ch != '{' {
			return false
		}
		a.st = sObjFirst
		return a.push('{')
	case sDone:
		return isSpace(ch) && a.space(ch)
	case sObjFirst, sObjKey:
		if isSpace(ch) {
			return a.space(ch)
		}
		if ch == '"' {
			a.st, a.key, a.spaces = sString, true, 0
			return true
		}
		if ch == '}' && a.st == sObjFirst {
			return a.pop('{')
		}
		return false
	case sColon:
		if isSpace(ch) {
			return a.space(ch)
		}
		if ch != ':' {
			return false
		}
		a.st, a.spaces = sValue, 0
		return true
	case sValue, sArrFirst:
		if isSpace(ch) {
			return a.space(ch)
		}
		if ch == ']' && a.st == sArrFirst {
			return a.pop('[')
		}
		return a.startValue(ch)
	case sAfter:
		if isSpace(ch) {
			return a.space(ch)
		}
		top := a.stack[a.depth-1]
		switch {
		case ch == ',' && top == '{':
			a.st, a.spaces = sObjKey, 0
			return true
		case ch == ',' && top == '[':
			a.st, a.spaces = sValue, 0
			return true
		case ch == '}':
			return a.pop('{')
		case ch == ']':
			return a.pop('[')
		}
		return false
	case sString:
		switch {
		case ch == '"':
			if a.key {
				a.st, a.spaces = sColon, 0
			} else {
				a.endValue()
			}
			return true
		case ch == '\\':
			a.st = sEscape
			return true
		case ch < 0x20:
			return false
		}
		return true
	case sEscape:
		switch ch {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			a.st = sString
			return true
		case 'u':
			a.st, a.hex = sUnicode, 4
			return true
		}
		return false
	case sUnicode:
		if !isHex(ch) {
			return false
		}
		a.hex--
		if a.hex == 0 {
			a.st = sString
		}
		return true
	case sNumMinus:
		switch {
		case ch == '0':
			a.st = sNumZero
		case isDigit(ch):
			a.st = sNumInt
		default:
			return false
		}
		return true
	case sNumZero:
		switch {
		case ch == '.':
			a.st = sNumDot
		case ch == 'e' || ch == 'E':
			a.st = sNumE
		case isDigit(ch):
			return false
		default:
			return a.afterNumber(ch)
		}
		return true
	case sNumInt:
		switch {
		case isDigit(ch):
		case ch == '.':
			a.st = sNumDot
		case ch == 'e' || ch == 'E':
			a.st = sNumE
		default:
			return a.afterNumber(ch)
		}
		return true
	case sNumDot:
		if !isDigit(ch) {
			return false
		}
		a.st = sNumFrac
		return true
	case sNumFrac:
		switch {
		case isDigit(ch):
		case ch == 'e' || ch == 'E':
			a.st = sNumE
		default:
			return a.afterNumber(ch)
		}
		return true
	case sNumE:
		switch {
		case ch == '+' || ch == '-':
			a.st = sNumESign
		case isDigit(ch):
			a.st = sNumExp
		default:
			return false
		}
		return true
	case sNumESign:
		if !isDigit(ch) {
			return false
		}
		a.st = sNumExp
		return true
	case sNumExp:
		if isDigit(ch) {
			return true
		}
		return a.afterNumber(ch)
	case sLiteral:
		if a.lit == "" || ch != a.lit[0] {
			return false
		}
		a.lit = a.lit[1:]
		if a.lit == "" {
			a.endValue()
		}
		return true
	}
	return false
}
