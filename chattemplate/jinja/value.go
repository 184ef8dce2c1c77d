package jinja

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Value is a template value. The dynamic types follow Python's, which is
// what Jinja templates are written against:
//
//	nil        None
//	Undefined  a missing variable, attribute or item
//	bool, int64, float64, string
//	*List      list, or tuple when Tuple is set
//	*Dict      dict, insertion-ordered like Python's
//	*Namespace namespace()
//	and internal callables (macros, builtins, bound methods, loop).
type Value any

// Undefined is the value of a missing variable, attribute or item. It
// prints as nothing and is false; most other uses are errors, as in
// Jinja's default Undefined.
type Undefined struct {
	Name string
	// Unsafe is set for a mutating method of a list or dict, which the
	// sandbox hides: calling it fails with this message, as Jinja2's
	// ImmutableSandboxedEnvironment raises SecurityError.
	Unsafe string
}

// List is a Python list, or a tuple when Tuple is set.
type List struct {
	Items []Value
	Tuple bool
}

// NewList returns a list of the given items.
func NewList(items ...Value) *List { return &List{Items: items} }

// Dict is an insertion-ordered dictionary. Keys are strings, numbers,
// booleans or None, hashed like Python's (1, 1.0 and True are one key).
type Dict struct {
	keys  []Value
	vals  []Value
	index map[any]int
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{index: map[any]int{}} }

type noneKey struct{}

// hashKey returns the Go map key for a Python dict key.
func hashKey(k Value) (any, error) {
	switch k := k.(type) {
	case nil:
		return noneKey{}, nil
	case bool:
		if k {
			return int64(1), nil
		}
		return int64(0), nil
	case int64, string:
		return k, nil
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return int64(k), nil
		}
		return k, nil
	}
	return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
}

// Set adds or replaces a key.
func (d *Dict) Set(k, v Value) error {
	h, err := hashKey(k)
	if err != nil {
		return err
	}
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// Get looks a key up.
func (d *Dict) Get(k Value) (Value, bool) {
	h, err := hashKey(k)
	if err != nil {
		return nil, false
	}
	i, ok := d.index[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []Value { return d.keys }

// Namespace is the mutable object namespace() returns.
type Namespace struct{ attrs *Dict }

// callable is a builtin function or bound method.
type callable struct {
	name string
	fn   func(r *renderer, args []Value, kwargs []kwValue) (Value, error)
}

type kwValue struct {
	name string
	v    Value
}

func typeName(v Value) string {
	switch v := v.(type) {
	case nil:
		return "NoneType"
	case Undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		if v.Tuple {
			return "tuple"
		}
		return "list"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *macro:
		return "Macro"
	case *callable:
		return "builtin_function_or_method"
	case *loopState:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// truth is Python's bool().
func truth(v Value) bool {
	switch v := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case *big.Int:
		return v.Sign() != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case *List:
		return len(v.Items) > 0
	case *Dict:
		return v.Len() > 0
	}
	return true
}

// toStr is Python's str(), as Jinja prints values.
func toStr(v Value) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case Undefined:
		return ""
	case string:
		return v
	}
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

// maxReprDepth stops printing self-containing or absurdly deep values.
const maxReprDepth = 100

// maxReprLen stops printing a value (or writing its JSON) past the default
// output limit: a list holding the same list twice, nested 60 deep, is
// built in 60 steps and would print 2^60 items. The cut repr is longer
// than the output and string limits, so using it fails.
const maxReprLen = 16<<20 + 1

// writeRepr writes Python's repr() of v, stopping past maxReprLen bytes.
func writeRepr(b *strings.Builder, v Value, depth int) {
	if b.Len() > maxReprLen {
		return
	}
	if depth > maxReprDepth {
		b.WriteString("...")
		return
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case Undefined:
		b.WriteString("Undefined")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case *big.Int:
		b.WriteString(v.String())
	case float64:
		b.WriteString(pyFloat(v))
	case string:
		b.WriteString(pyRepr(v))
	case *List:
		open, close := "[", "]"
		if v.Tuple {
			open, close = "(", ")"
		}
		b.WriteString(open)
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, it, depth+1)
		}
		if v.Tuple && len(v.Items) == 1 {
			b.WriteString(",")
		}
		b.WriteString(close)
	case *Dict:
		b.WriteString("{")
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, depth+1)
			b.WriteString(": ")
			writeRepr(b, v.vals[i], depth+1)
		}
		b.WriteString("}")
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, v.attrs, depth+1)
		b.WriteString(">")
	case *macro:
		fmt.Fprintf(b, "<Macro '%s'>", v.name)
	case *callable:
		fmt.Fprintf(b, "<built-in function %s>", v.name)
	default:
		fmt.Fprintf(b, "<%s object>", typeName(v))
	}
}

// pyFloat formats a float like Python's repr(): the shortest digits that
// round-trip, in fixed notation when the exponent is in [-4, 16).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s
	}
	return e
}

// pyRepr is Python's repr() of a string.
func pyRepr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && !isPrintable(r):
			switch {
			case r <= 0xff:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// isPrintable approximates Python's str.isprintable for one character.
func isPrintable(r rune) bool {
	if r == utf8.RuneError {
		return true
	}
	return strconvIsPrint(r) && r != 0xa0 && r != 0xad
}

var strconvIsPrint = strconv.IsPrint

// equal is Python's ==.
func equal(a, b Value) bool {
	return (&equality{}).equal(a, b)
}

// equality compares values, remembering the pairs of lists and dicts found
// equal: a list holding the same list twice, nested 60 deep, is compared
// in 60 comparisons instead of 2^60.
type equality struct {
	same map[[2]any]bool
}

func (q *equality) equal(a, b Value) bool {
	if x, ok := number(a); ok {
		if y, ok := number(b); ok {
			return x == y
		}
		return false
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case string:
		s, ok := b.(string)
		return ok && a == s
	case *List:
		l, ok := b.(*List)
		if !ok || l.Tuple != a.Tuple || len(l.Items) != len(a.Items) {
			return false
		}
		if q.same[[2]any{a, l}] {
			return true
		}
		nested := false
		for i := range a.Items {
			if !q.equal(a.Items[i], l.Items[i]) {
				return false
			}
			nested = nested || isContainer(a.Items[i])
		}
		if nested {
			q.remember(a, l)
		}
		return true
	case *Dict:
		d, ok := b.(*Dict)
		if !ok || d.Len() != a.Len() {
			return false
		}
		if q.same[[2]any{a, d}] {
			return true
		}
		nested := false
		for i, k := range a.keys {
			v, ok := d.Get(k)
			if !ok || !q.equal(a.vals[i], v) {
				return false
			}
			nested = nested || isContainer(a.vals[i])
		}
		if nested {
			q.remember(a, d)
		}
		return true
	}
	return a == b
}

// isContainer reports whether v is a list or a dict.
func isContainer(v Value) bool {
	switch v.(type) {
	case *List, *Dict:
		return true
	}
	return false
}

// remember records that a and b, holding lists or dicts, are equal.
func (q *equality) remember(a, b Value) {
	if q.same == nil {
		q.same = map[[2]any]bool{}
	}
	q.same[[2]any{a, b}] = true
}

// number converts bool, int64, big ints and float64 to float64 for
// comparisons.
func number(v Value) (float64, bool) {
	switch v := v.(type) {
	case *big.Int:
		f, _ := new(big.Float).SetInt(v).Float64()
		return f, true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case int64:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

// asInt returns v as an integer when it is a bool or int.
func asInt(v Value) (int64, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case int64:
		return v, true
	}
	return 0, false
}

// compare is Python's ordering of two values: -1, 0 or 1.
func compare(a, b Value) (int, error) {
	if ai, ok := asInt(a); ok {
		if bi, ok := asInt(b); ok {
			return cmpOrdered(ai, bi), nil
		}
	}
	if x, ok := number(a); ok {
		if y, ok := number(b); ok {
			return cmpOrdered(x, y), nil
		}
	}
	switch a := a.(type) {
	case string:
		if s, ok := b.(string); ok {
			return strings.Compare(a, s), nil
		}
	case *List:
		if l, ok := b.(*List); ok && l.Tuple == a.Tuple {
			for i := 0; i < len(a.Items) && i < len(l.Items); i++ {
				if equal(a.Items[i], l.Items[i]) {
					continue
				}
				return compare(a.Items[i], l.Items[i])
			}
			return cmpOrdered(len(a.Items), len(l.Items)), nil
		}
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func cmpOrdered[T int | int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
