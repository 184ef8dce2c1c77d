package peft

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ktserve/kt/internal/pyjson"
)

// Float is a float64 that MarshalPython writes as Python's repr(float) does
// (16 -> "16.0", 1e-05 -> "1e-05"), matching values that Python code wrote as
// floats.
type Float float64

// MarshalPython encodes v as Python's json.dumps(v, indent=2, sort_keys=True)
// does: two-space indentation, sorted object keys, non-ASCII escaped as
// \uXXXX, floats in repr form. v may hold nil, bool, string, json.Number,
// Float, float64, int, int64, []string, []any and map[string]any.
func MarshalPython(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := pyEncode(&b, v, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func pyEncode(b *bytes.Buffer, v any, depth int) error {
	if depth > 1000 {
		return fmt.Errorf("value nested too deeply")
	}
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(t))
	case string:
		pyjson.WriteString(b, t, true)
	case json.Number:
		s, err := pyNumber(string(t))
		if err != nil {
			return err
		}
		b.WriteString(s)
	case Float:
		return pyEncode(b, float64(t), depth)
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return fmt.Errorf("cannot encode %v as JSON", t)
		}
		b.WriteString(pyFloat(t))
	case int:
		b.WriteString(strconv.Itoa(t))
	case int64:
		b.WriteString(strconv.FormatInt(t, 10))
	case []string:
		items := make([]any, len(t))
		for i, s := range t {
			items[i] = s
		}
		return pyEncode(b, items, depth)
	case []any:
		if len(t) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteString("[")
		for i, x := range t {
			if i > 0 {
				b.WriteString(",")
			}
			newline(b, depth+1)
			if err := pyEncode(b, x, depth+1); err != nil {
				return err
			}
		}
		newline(b, depth)
		b.WriteString("]")
	case map[string]any:
		if len(t) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return pyLess(keys[i], keys[j]) })
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(",")
			}
			newline(b, depth+1)
			pyjson.WriteString(b, k, true)
			b.WriteString(": ")
			if err := pyEncode(b, t[k], depth+1); err != nil {
				return err
			}
		}
		newline(b, depth)
		b.WriteString("}")
	default:
		return fmt.Errorf("cannot encode %T as JSON", v)
	}
	return nil
}

func newline(b *bytes.Buffer, depth int) {
	b.WriteByte('\n')
	for range depth {
		b.WriteString("  ")
	}
}

// pyLess orders strings by code point, as Python's sorted() does (Go's string
// order is by UTF-8 byte, which agrees except for invalid UTF-8).
func pyLess(a, b string) bool {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return ra < rb
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) < len(b)
}

// pyNumber re-renders a JSON number literal as Python would after json.load:
// integers exactly, anything with a fraction or exponent as a float repr.
func pyNumber(lit string) (string, error) {
	if !strings.ContainsAny(lit, ".eE") {
		n, ok := new(big.Int).SetString(lit, 10)
		if !ok {
			return "", fmt.Errorf("invalid JSON number %q", lit)
		}
		return n.String(), nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		// Python would write an out-of-range number back as Infinity,
		// which is not JSON; refuse instead.
		return "", fmt.Errorf("JSON number %q: %w", lit, err)
	}
	return pyFloat(f), nil
}

// pyFloat formats a finite f as Python's float.__repr__.
func pyFloat(f float64) string {
	e := strconv.FormatFloat(f, 'e', -1, 64) // shortest round-trip digits
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if f != 0 && (exp < -4 || exp >= 16) {
		return e // Go and Python agree: "1e-05", "1.5e+16"
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
