package jinja

import (
	"errors"
	"fmt"
	"html"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

type filterFunc func(r *renderer, v Value, args []Value, kwargs []kwValue) (Value, error)
type testFunc func(v Value, args []Value) (bool, error)

// The builtin tables are filled once by init and only read afterwards.
var (
	filters map[string]filterFunc
	tests   map[string]testFunc
	globals map[string]Value
)

// params binds positional and keyword arguments to names, Python style;
// missing ones take the defaults (nil default means required).
func params(fn string, args []Value, kwargs []kwValue, names []string, defaults ...Value) ([]Value, error) {
	if len(args) > len(names) {
		return nil, fmt.Errorf("%s takes at most %d arguments (%d given)", fn, len(names), len(args))
	}
	out := make([]Value, len(names))
	set := make([]bool, len(names))
	for i, a := range args {
		out[i], set[i] = a, true
	}
	for _, k := range kwargs {
		i := slices.Index(names, k.name)
		if i < 0 {
			return nil, fmt.Errorf("%s got an unexpected keyword argument '%s'", fn, k.name)
		}
		if set[i] {
			return nil, fmt.Errorf("%s got multiple values for argument '%s'", fn, k.name)
		}
		out[i], set[i] = k.v, true
	}
	for i := range names {
		if set[i] {
			continue
		}
		if i >= len(defaults) {
			return nil, fmt.Errorf("%s missing required argument '%s'", fn, names[i])
		}
		out[i] = defaults[i]
	}
	return out, nil
}

func str(v Value) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("expected a string, got %s", typeName(v))
}

func fn(name string, f func(r *renderer, args []Value, kwargs []kwValue) (Value, error)) *callable {
	return &callable{name: name, fn: f}
}

func init() {
	globals = map[string]Value{
		"range": fn("range", func(r *renderer, args []Value, _ []kwValue) (Value, error) {
			var start, stop, step int64 = 0, 0, 1
			ints := make([]int64, len(args))
			for i, a := range args {
				n, ok := asInt(a)
				if !ok {
					return nil, fmt.Errorf("'%s' object cannot be interpreted as an integer", typeName(a))
				}
				ints[i] = n
			}
			switch len(ints) {
			case 1:
				stop = ints[0]
			case 2:
				start, stop = ints[0], ints[1]
			case 3:
				start, stop, step = ints[0], ints[1], ints[2]
			default:
				return nil, fmt.Errorf("range expected 1 to 3 arguments, got %d", len(args))
			}
			if step == 0 {
				return nil, errors.New("range() arg 3 must not be zero")
			}
			n := int64(0)
			if step > 0 && stop > start {
				n = (stop - start + step - 1) / step
			} else if step < 0 && start > stop {
				n = (start - stop - step - 1) / -step
			}
			if n > int64(r.limits.MaxItems) {
				return nil, fmt.Errorf("range of %d items is more than %d", n, r.limits.MaxItems)
			}
			l := &List{Items: make([]Value, n)}
			for i := range n {
				l.Items[i] = start + i*step
			}
			return l, nil
		}),
		"namespace": fn("namespace", func(_ *renderer, args []Value, kwargs []kwValue) (Value, error) {
			ns := &Namespace{attrs: NewDict()}
			for _, a := range args {
				d, ok := a.(*Dict)
				if !ok {
					return nil, fmt.Errorf("namespace() positional argument must be a dict, not %s", typeName(a))
				}
				for i, k := range d.keys {
					_ = ns.attrs.Set(k, d.vals[i])
				}
			}
			for _, k := range kwargs {
				_ = ns.attrs.Set(k.name, k.v)
			}
			return ns, nil
		}),
		"dict": fn("dict", func(_ *renderer, args []Value, kwargs []kwValue) (Value, error) {
			d := NewDict()
			for _, a := range args {
				src, ok := a.(*Dict)
				if !ok {
					return nil, fmt.Errorf("dict() argument must be a dict, not %s", typeName(a))
				}
				for i, k := range src.keys {
					_ = d.Set(k, src.vals[i])
				}
			}
			for _, k := range kwargs {
				_ = d.Set(k.name, k.v)
			}
			return d, nil
		}),
		"raise_exception": fn("raise_exception", func(_ *renderer, args []Value, _ []kwValue) (Value, error) {
			msg := ""
			if len(args) > 0 {
				msg = toStr(args[0])
			}
			return nil, &raisedError{msg: msg}
		}),
		"strftime_now": fn("strftime_now", func(r *renderer, args []Value, kwargs []kwValue) (Value, error) {
			a, err := params("strftime_now", args, kwargs, []string{"format"})
			if err != nil {
				return nil, err
			}
			f, err := str(a[0])
			if err != nil {
				return nil, err
			}
			return strftime(r.now(), f), nil
		}),
	}
	tests = map[string]testFunc{
		"defined":   func(v Value, _ []Value) (bool, error) { _, u := v.(Undefined); return !u, nil },
		"undefined": func(v Value, _ []Value) (bool, error) { _, u := v.(Undefined); return u, nil },
		"none":      func(v Value, _ []Value) (bool, error) { return v == nil, nil },
		"string":    func(v Value, _ []Value) (bool, error) { _, ok := v.(string); return ok, nil },
		"number": func(v Value, _ []Value) (bool, error) {
			_, ok := number(v)
			return ok, nil
		},
		"integer": func(v Value, _ []Value) (bool, error) {
			switch v.(type) {
			case int64, *big.Int:
				return true, nil
			}
			return false, nil
		},
		"float":   func(v Value, _ []Value) (bool, error) { _, ok := v.(float64); return ok, nil },
		"boolean": func(v Value, _ []Value) (bool, error) { _, ok := v.(bool); return ok, nil },
		"true":    func(v Value, _ []Value) (bool, error) { b, ok := v.(bool); return ok && b, nil },
		"false":   func(v Value, _ []Value) (bool, error) { b, ok := v.(bool); return ok && !b, nil },
		"mapping": func(v Value, _ []Value) (bool, error) { _, ok := v.(*Dict); return ok, nil },
		"iterable": func(v Value, _ []Value) (bool, error) {
			switch v.(type) {
			case string, *List, *Dict, Undefined:
				return true, nil
			}
			return false, nil
		},
		"sequence": func(v Value, _ []Value) (bool, error) {
			switch v.(type) {
			case string, *List, *Dict, Undefined:
				return true, nil
			}
			return false, nil
		},
		"callable": func(v Value, _ []Value) (bool, error) {
			switch v.(type) {
			case *macro, *callable:
				return true, nil
			}
			return false, nil
		},
		"odd": func(v Value, _ []Value) (bool, error) {
			n, ok := asInt(v)
			if !ok {
				return false, fmt.Errorf("odd: not an integer: %s", typeName(v))
			}
			return n%2 != 0, nil
		},
		"even": func(v Value, _ []Value) (bool, error) {
			n, ok := asInt(v)
			if !ok {
				return false, fmt.Errorf("even: not an integer: %s", typeName(v))
			}
			return n%2 == 0, nil
		},
		"divisibleby": func(v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, errors.New("divisibleby takes one argument")
			}
			n, ok1 := asInt(v)
			d, ok2 := asInt(args[0])
			if !ok1 || !ok2 || d == 0 {
				return false, errors.New("divisibleby needs integers and a non-zero divisor")
			}
			return n%d == 0, nil
		},
		"sameas": func(v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, errors.New("sameas takes one argument")
			}
			switch a := args[0].(type) {
			case nil, bool:
				return v == a, nil
			}
			return equal(v, args[0]) && typeName(v) == typeName(args[0]), nil
		},
		"in": func(v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, errors.New("in takes one argument")
			}
			return contains(args[0], v)
		},
		"lower": func(v Value, _ []Value) (bool, error) {
			s, ok := v.(string)
			return ok && s == strings.ToLower(s), nil
		},
		"upper": func(v Value, _ []Value) (bool, error) {
			s, ok := v.(string)
			return ok && s == strings.ToUpper(s), nil
		},
		"escaped": func(Value, []Value) (bool, error) { return false, nil },
	}
	cmpTest := func(want func(int) bool) testFunc {
		return func(v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, errors.New("comparison test takes one argument")
			}
			c, err := compare(v, args[0])
			return err == nil && want(c), err
		}
	}
	eq := func(v Value, args []Value) (bool, error) {
		if len(args) != 1 {
			return false, errors.New("eq takes one argument")
		}
		return equal(v, args[0]), nil
	}
	ne := func(v Value, args []Value) (bool, error) { b, err := eq(v, args); return !b, err }
	for _, n := range []string{"eq", "equalto", "=="} {
		tests[n] = eq
	}
	for _, n := range []string{"ne", "!="} {
		tests[n] = ne
	}
	for n, f := range map[string]func(int) bool{
		"lt": func(c int) bool { return c < 0 }, "le": func(c int) bool { return c <= 0 },
		"gt": func(c int) bool { return c > 0 }, "ge": func(c int) bool { return c >= 0 },
		"lessthan": func(c int) bool { return c < 0 }, "greaterthan": func(c int) bool { return c > 0 },
	} {
		tests[n] = cmpTest(f)
	}
	tests["<"], tests["<="], tests[">"], tests[">="] = tests["lt"], tests["le"], tests["gt"], tests["ge"]

	filters = map[string]filterFunc{
		"abs": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			switch v := v.(type) {
			case int64:
				if v < 0 {
					return -v, nil
				}
				return v, nil
			case float64:
				return math.Abs(v), nil
			case bool:
				n, _ := asInt(v)
				return n, nil
			}
			return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
		},
		"attr": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("attr", args, kw, []string{"name"})
			if err != nil {
				return nil, err
			}
			name, err := str(a[0])
			if err != nil {
				return nil, err
			}
			return r.getAttr(v, name, 0)
		},
		"capitalize": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			s := toStr(v)
			rs := []rune(strings.ToLower(s))
			if len(rs) > 0 {
				rs[0] = unicode.ToUpper(rs[0])
			}
			return string(rs), nil
		},
		"center": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("center", args, kw, []string{"width"}, int64(80))
			if err != nil {
				return nil, err
			}
			w, _ := asInt(a[0])
			if w > int64(r.limits.MaxOutput) {
				return nil, fmt.Errorf("width %d is too large", w)
			}
			return pyCenter(toStr(v), int(w)), nil
		},
		"default": filterDefault,
		"d":       filterDefault,
		"dictsort": func(_ *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("dictsort", args, kw, []string{"case_sensitive", "by", "reverse"}, false, "key", false)
			if err != nil {
				return nil, err
			}
			d, ok := v.(*Dict)
			if !ok {
				return nil, errors.New("dictsort: expected a dict")
			}
			pos := 0
			if a[1] == "value" {
				pos = 1
			}
			items := dictItems(d).Items
			err = sortValues(items, truth(a[2]), func(x Value) Value {
				return foldCase(x.(*List).Items[pos], truth(a[0]))
			})
			return &List{Items: items}, err
		},
		"escape": filterEscape,
		"e":      filterEscape,
		"forceescape": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			return filterEscape(r, v, args, kw)
		},
		"first": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			if len(items) == 0 {
				return Undefined{Name: "first"}, nil
			}
			return items[0], nil
		},
		"last": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			if len(items) == 0 {
				return Undefined{Name: "last"}, nil
			}
			return items[len(items)-1], nil
		},
		"float": func(_ *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("float", args, kw, []string{"default"}, 0.0)
			if err != nil {
				return nil, err
			}
			if f, ok := number(v); ok {
				return f, nil
			}
			if s, ok := v.(string); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
					return f, nil
				}
			}
			return a[0], nil
		},
		"int": func(_ *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("int", args, kw, []string{"default", "base"}, int64(0), int64(10))
			if err != nil {
				return nil, err
			}
			if n, ok := asInt(v); ok {
				return n, nil
			}
			if f, ok := v.(float64); ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return int64(f), nil
			}
			if s, ok := v.(string); ok {
				base, _ := asInt(a[1])
				if n, err := strconv.ParseInt(strings.TrimSpace(s), int(base), 64); err == nil {
					return n, nil
				}
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
					return int64(f), nil
				}
			}
			return a[0], nil
		},
		"items": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			switch v := v.(type) {
			case *Dict:
				return dictItems(v), nil
			case Undefined:
				return &List{}, nil
			}
			return nil, errors.New("Can only get item pairs from a mapping.")
		},
		"indent": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("indent", args, kw, []string{"width", "first", "blank"}, int64(4), false, false)
			if err != nil {
				return nil, err
			}
			pad := ""
			if w, ok := asInt(a[0]); ok {
				if w > 1000 {
					return nil, fmt.Errorf("indent width %d is too large", w)
				}
				pad = strings.Repeat(" ", int(max(w, 0)))
			} else if s, ok := a[0].(string); ok {
				pad = s
			}
			text := toStr(v)
			lines := strings.Split(text, "\n")
			if len(text)+len(pad)*len(lines) > r.limits.MaxOutput {
				return nil, fmt.Errorf("string longer than %d bytes", r.limits.MaxOutput)
			}
			for i := range lines {
				if i == 0 && !truth(a[1]) {
					continue
				}
				if lines[i] == "" && !truth(a[2]) {
					continue
				}
				lines[i] = pad + lines[i]
			}
			return strings.Join(lines, "\n"), nil
		},
		"join": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("join", args, kw, []string{"d", "attribute"}, "", nil)
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			sep := toStr(a[0])
			parts := make([]string, len(items))
			n := 0
			for i, it := range items {
				if a[1] != nil {
					if it, err = r.getItem(it, a[1], 0); err != nil {
						return nil, err
					}
				}
				parts[i] = toStr(it)
				if n += len(parts[i]) + len(sep); n > r.limits.MaxOutput+len(sep) {
					return nil, fmt.Errorf("string longer than %d bytes", r.limits.MaxOutput)
				}
			}
			return strings.Join(parts, sep), nil
		},
		"length": filterLength,
		"count":  filterLength,
		"list": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			return &List{Items: slices.Clone(items)}, nil
		},
		"lower": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			return strings.ToLower(toStr(v)), nil
		},
		"upper": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			return strings.ToUpper(toStr(v)), nil
		},
		"title": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			return pyTitle(toStr(v)), nil
		},
		"trim": func(_ *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("trim", args, kw, []string{"chars"}, nil)
			if err != nil {
				return nil, err
			}
			return pyStrip(toStr(v), a[0], true, true)
		},
		"map":        filterMap,
		"select":     selectFilter(false, false),
		"reject":     selectFilter(true, false),
		"selectattr": selectFilter(false, true),
		"rejectattr": selectFilter(true, true),
		"max":        minMax(1),
		"min":        minMax(-1),
		"replace": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("replace", args, kw, []string{"old", "new", "count"}, nil, nil, nil)
			if err != nil {
				return nil, err
			}
			n := int64(-1)
			if a[2] != nil {
				n, _ = asInt(a[2])
			}
			return replace(toStr(v), toStr(a[0]), toStr(a[1]), n, r.limits.MaxOutput)
		},
		"reverse": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			if s, ok := v.(string); ok {
				rs := []rune(s)
				slices.Reverse(rs)
				return string(rs), nil
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			out := slices.Clone(items)
			slices.Reverse(out)
			return &List{Items: out}, nil
		},
		"round": func(_ *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("round", args, kw, []string{"precision", "method"}, int64(0), "common")
			if err != nil {
				return nil, err
			}
			f, ok := number(v)
			if !ok {
				return nil, fmt.Errorf("round: not a number: %s", typeName(v))
			}
			p, _ := asInt(a[0])
			m := math.Pow(10, float64(p))
			switch a[1] {
			case "common": // Python's round(): half to even
				return math.RoundToEven(f*m) / m, nil
			case "ceil":
				return math.Ceil(f*m) / m, nil
			case "floor":
				return math.Floor(f*m) / m, nil
			}
			return nil, errors.New("round: method must be 'common', 'ceil' or 'floor'")
		},
		"safe": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			if _, ok := v.(Undefined); ok {
				return "", nil
			}
			return v, nil
		},
		"string": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			return toStr(v), nil
		},
		"sort": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("sort", args, kw, []string{"reverse", "case_sensitive", "attribute"}, false, false, nil)
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			out := slices.Clone(items)
			err = sortValues(out, truth(a[0]), func(x Value) Value {
				if a[2] != nil {
					x, _ = r.getItem(x, a[2], 0)
				}
				return foldCase(x, truth(a[1]))
			})
			return &List{Items: out}, err
		},
		"sum": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("sum", args, kw, []string{"attribute", "start"}, nil, int64(0))
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			total := a[1]
			for _, it := range items {
				if a[0] != nil {
					if it, err = r.getItem(it, a[0], 0); err != nil {
						return nil, err
					}
				}
				if total, err = r.binop("+", total, it); err != nil {
					return nil, err
				}
			}
			return total, nil
		},
		"tojson": func(_ *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("tojson", args, kw, []string{"ensure_ascii", "indent", "separators", "sort_keys"}, false, nil, nil, false)
			if err != nil {
				return nil, err
			}
			o := jsonOptions{ensureASCII: truth(a[0]), sortKeys: truth(a[3]), itemSep: ", ", keySep: ": "}
			switch ind := a[1].(type) {
			case nil:
			case string:
				if len(ind) > 1000 {
					return nil, fmt.Errorf("tojson: indent of %d bytes is too large", len(ind))
				}
				o.indent = &ind
				o.itemSep = ","
			default:
				n, ok := asInt(ind)
				if !ok {
					return nil, errors.New("tojson: indent must be an integer or a string")
				}
				if n > 1000 {
					return nil, fmt.Errorf("tojson: indent %d is too large", n)
				}
				s := strings.Repeat(" ", int(max(n, 0)))
				o.indent = &s
				o.itemSep = ","
			}
			if a[2] != nil {
				l, ok := a[2].(*List)
				if !ok || len(l.Items) != 2 {
					return nil, errors.New("tojson: separators must be a pair of strings")
				}
				if o.itemSep, err = str(l.Items[0]); err != nil {
					return nil, err
				}
				if o.keySep, err = str(l.Items[1]); err != nil {
					return nil, err
				}
			}
			return toJSON(v, o)
		},
		"unique": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("unique", args, kw, []string{"case_sensitive", "attribute"}, false, nil)
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			var out, seen []Value
			for _, it := range items {
				key := it
				if a[1] != nil {
					if key, err = r.getItem(it, a[1], 0); err != nil {
						return nil, err
					}
				}
				key = foldCase(key, truth(a[0]))
				if !slices.ContainsFunc(seen, func(s Value) bool { return equal(s, key) }) {
					seen = append(seen, key)
					out = append(out, it)
				}
			}
			return &List{Items: out}, nil
		},
		"wordcount": func(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
			return int64(len(strings.FieldsFunc(toStr(v), func(r rune) bool {
				return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
			}))), nil
		},
		"format": func(r *renderer, v Value, args []Value, _ []kwValue) (Value, error) {
			return pyFormat(toStr(v), &List{Items: args, Tuple: true}, r.limits.MaxOutput)
		},
		"batch": func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
			a, err := params("batch", args, kw, []string{"linecount", "fill_with"}, nil, nil)
			if err != nil {
				return nil, err
			}
			n, ok := asInt(a[0])
			if !ok || n <= 0 {
				return nil, errors.New("batch: linecount must be a positive integer")
			}
			if n > int64(r.limits.MaxItems) {
				return nil, fmt.Errorf("batch: linecount %d is more than %d", n, r.limits.MaxItems)
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			out := &List{}
			for i := 0; i < len(items); i += int(n) {
				row := slices.Clone(items[i:min(i+int(n), len(items))])
				if a[1] != nil {
					for len(row) < int(n) {
						row = append(row, a[1])
					}
				}
				out.Items = append(out.Items, &List{Items: row})
			}
			return out, nil
		},
	}
}

func filterDefault(_ *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
	a, err := params("default", args, kw, []string{"default_value", "boolean"}, "", false)
	if err != nil {
		return nil, err
	}
	if _, undef := v.(Undefined); undef || (truth(a[1]) && !truth(v)) {
		return a[0], nil
	}
	return v, nil
}

func filterEscape(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
	s := html.EscapeString(toStr(v))
	return strings.NewReplacer("&#39;", "&#39;", "&#34;", "&#34;").Replace(s), nil
}

func filterLength(_ *renderer, v Value, _ []Value, _ []kwValue) (Value, error) {
	switch v := v.(type) {
	case string:
		return int64(len([]rune(v))), nil
	case *List:
		return int64(len(v.Items)), nil
	case *Dict:
		return int64(v.Len()), nil
	case Undefined:
		return int64(0), nil
	case *Namespace:
		return int64(v.attrs.Len()), nil
	}
	return nil, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

func dictItems(d *Dict) *List {
	out := &List{Items: make([]Value, d.Len())}
	for i, k := range d.keys {
		out.Items[i] = &List{Items: []Value{k, d.vals[i]}, Tuple: true}
	}
	return out
}

// foldCase lowercases strings for case-insensitive sorting.
func foldCase(v Value, caseSensitive bool) Value {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

func sortValues(items []Value, reverse bool, key func(Value) Value) error {
	var err error
	slices.SortStableFunc(items, func(a, b Value) int {
		c, e := compare(key(a), key(b))
		if e != nil && err == nil {
			err = e
		}
		if reverse {
			return -c
		}
		return c
	})
	return err
}

func filterMap(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := &List{Items: make([]Value, 0, len(items))}
	var attr, def Value
	hasDefault := false
	for _, k := range kw {
		switch k.name {
		case "attribute":
			attr = k.v
		case "default":
			def, hasDefault = k.v, true
		default:
			return nil, fmt.Errorf("map got an unexpected keyword argument '%s'", k.name)
		}
	}
	if attr != nil {
		for _, it := range items {
			x, err := r.getItem(it, attr, 0)
			if err != nil {
				return nil, err
			}
			if _, undef := x.(Undefined); undef && hasDefault {
				x = def
			}
			out.Items = append(out.Items, x)
		}
		return out, nil
	}
	if len(args) == 0 {
		return nil, errors.New("map needs a filter name or attribute=")
	}
	name, err := str(args[0])
	if err != nil {
		return nil, err
	}
	f, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("no filter named '%s'", name)
	}
	for _, it := range items {
		x, err := f(r, it, args[1:], nil)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, x)
	}
	return out, nil
}

func selectFilter(reject, byAttr bool) filterFunc {
	return func(r *renderer, v Value, args []Value, _ []kwValue) (Value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		var attr Value
		if byAttr {
			if len(args) == 0 {
				return nil, errors.New("selectattr/rejectattr need an attribute name")
			}
			attr, args = args[0], args[1:]
		}
		var test testFunc
		if len(args) > 0 {
			name, err := str(args[0])
			if err != nil {
				return nil, err
			}
			t, ok := tests[name]
			if !ok {
				return nil, fmt.Errorf("no test named '%s'", name)
			}
			test, args = t, args[1:]
		}
		out := &List{}
		for _, it := range items {
			x := it
			if attr != nil {
				if x, err = r.getItem(it, attr, 0); err != nil {
					return nil, err
				}
			}
			ok := truth(x)
			if test != nil {
				if ok, err = test(x, args); err != nil {
					return nil, err
				}
			}
			if ok != reject {
				out.Items = append(out.Items, it)
			}
		}
		return out, nil
	}
}

func minMax(sign int) filterFunc {
	return func(r *renderer, v Value, args []Value, kw []kwValue) (Value, error) {
		a, err := params("min/max", args, kw, []string{"case_sensitive", "attribute"}, false, nil)
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{Name: "min/max of an empty sequence"}, nil
		}
		key := func(x Value) (Value, error) {
			if a[1] != nil {
				var err error
				if x, err = r.getItem(x, a[1], 0); err != nil {
					return nil, err
				}
			}
			return foldCase(x, truth(a[0])), nil
		}
		best := items[0]
		bk, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			c, err := compare(k, bk)
			if err != nil {
				return nil, err
			}
			if c*sign > 0 {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

// applyFilter runs a filter expression on v.
func (r *renderer) applyFilter(f *filterExpr, v Value, s *scope) (Value, error) {
	if err := r.step(f.line); err != nil {
		return nil, err
	}
	fn, ok := filters[f.name]
	if !ok {
		return nil, r.errorf(f.line, "no filter named '%s'", f.name)
	}
	args, kwargs, err := r.evalArgs(f.args, f.kwargs, s)
	if err != nil {
		return nil, err
	}
	if err := r.work(size(v) + argsSize(args, kwargs)); err != nil {
		return nil, r.errorf(f.line, "%v", err)
	}
	out, err := fn(r, v, args, kwargs)
	if err == nil {
		err = r.checkBuilt(out)
	}
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, r.errorf(f.line, "filter %s: %v", f.name, err)
	}
	return out, nil
}

func (r *renderer) evalTest(e *testExpr, s *scope) (Value, error) {
	t, ok := tests[e.name]
	if !ok {
		return nil, r.errorf(e.line, "no test named '%s'", e.name)
	}
	v, err := r.eval(e.obj, s)
	if err != nil {
		return nil, err
	}
	args := make([]Value, len(e.args))
	for i, a := range e.args {
		if args[i], err = r.eval(a, s); err != nil {
			return nil, err
		}
	}
	ok, err = t(v, args)
	if err != nil {
		return nil, r.errorf(e.line, "test %s: %v", e.name, err)
	}
	return ok != e.negate, nil
}

// strftime formats t with the common C strftime directives.
func strftime(t interface {
	Format(string) string
	Year() int
	YearDay() int
}, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			b.WriteString(t.Format("2006"))
		case 'y':
			b.WriteString(t.Format("06"))
		case 'm':
			b.WriteString(t.Format("01"))
		case 'd':
			b.WriteString(t.Format("02"))
		case 'e':
			b.WriteString(t.Format("_2"))
		case 'H':
			b.WriteString(t.Format("15"))
		case 'I':
			b.WriteString(t.Format("03"))
		case 'M':
			b.WriteString(t.Format("04"))
		case 'S':
			b.WriteString(t.Format("05"))
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}
