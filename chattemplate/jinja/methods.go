package jinja

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// mutatingMethod reports whether name is a method that mutates obj, a list
// or dict: the immutable sandbox refuses to hand these out (Jinja2's
// modifies_known_mutable), even when a dict has an item of that name.
func mutatingMethod(obj Value, name string) bool {
	switch o := obj.(type) {
	case *List:
		if o.Tuple {
			return false
		}
		switch name {
		case "append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove":
			return true
		}
	case *Dict:
		switch name {
		case "clear", "pop", "popitem", "setdefault", "update":
			return true
		}
	}
	return false
}

// method returns the bound method name of obj (Python's str, dict and
// list methods that do not mutate), or nil.
func method(obj Value, name string) Value {
	switch o := obj.(type) {
	case string:
		if m, ok := strMethods[name]; ok {
			return &callable{name: "str." + name, fn: func(r *renderer, args []Value, kw []kwValue) (Value, error) {
				return m(r, o, args, kw)
			}}
		}
	case *Dict:
		switch name {
		case "items":
			return &callable{name: "dict.items", fn: func(*renderer, []Value, []kwValue) (Value, error) { return dictItems(o), nil }}
		case "keys":
			return &callable{name: "dict.keys", fn: func(*renderer, []Value, []kwValue) (Value, error) {
				return &List{Items: append([]Value(nil), o.keys...)}, nil
			}}
		case "values":
			return &callable{name: "dict.values", fn: func(*renderer, []Value, []kwValue) (Value, error) {
				return &List{Items: append([]Value(nil), o.vals...)}, nil
			}}
		case "get":
			return &callable{name: "dict.get", fn: func(_ *renderer, args []Value, kw []kwValue) (Value, error) {
				a, err := params("get", args, kw, []string{"key", "default"}, nil, nil)
				if err != nil {
					return nil, err
				}
				if v, ok := o.Get(a[0]); ok {
					return v, nil
				}
				return a[1], nil
			}}
		}
	case *List:
		switch name {
		case "index":
			return &callable{name: "list.index", fn: func(_ *renderer, args []Value, _ []kwValue) (Value, error) {
				if len(args) != 1 {
					return nil, errors.New("index takes one argument")
				}
				for i, it := range o.Items {
					if equal(it, args[0]) {
						return int64(i), nil
					}
				}
				return nil, fmt.Errorf("%s is not in list", toStr(args[0]))
			}}
		case "count":
			return &callable{name: "list.count", fn: func(_ *renderer, args []Value, _ []kwValue) (Value, error) {
				if len(args) != 1 {
					return nil, errors.New("count takes one argument")
				}
				n := int64(0)
				for _, it := range o.Items {
					if equal(it, args[0]) {
						n++
					}
				}
				return n, nil
			}}
		}
	}
	return nil
}

type strMethod func(r *renderer, s string, args []Value, kw []kwValue) (Value, error)

var strMethods map[string]strMethod

func init() {
	strMethods = map[string]strMethod{
		"startswith": func(_ *renderer, s string, args []Value, kw []kwValue) (Value, error) {
			return affix(s, args, kw, strings.HasPrefix)
		},
		"endswith": func(_ *renderer, s string, args []Value, kw []kwValue) (Value, error) {
			return affix(s, args, kw, strings.HasSuffix)
		},
		"split": func(_ *renderer, s string, args []Value, kw []kwValue) (Value, error) {
			return pySplit(s, args, kw, false)
		},
		"rsplit": func(_ *renderer, s string, args []Value, kw []kwValue) (Value, error) {
			return pySplit(s, args, kw, true)
		},
		"strip":  stripMethod(true, true),
		"lstrip": stripMethod(true, false),
		"rstrip": stripMethod(false, true),
		"upper": func(_ *renderer, s string, _ []Value, _ []kwValue) (Value, error) {
			return strings.ToUpper(s), nil
		},
		"lower": func(_ *renderer, s string, _ []Value, _ []kwValue) (Value, error) {
			return strings.ToLower(s), nil
		},
		"title": func(_ *renderer, s string, _ []Value, _ []kwValue) (Value, error) {
			return pyTitle(s), nil
		},
		"capitalize": func(_ *renderer, s string, _ []Value, _ []kwValue) (Value, error) {
			rs := []rune(strings.ToLower(s))
			if len(rs) > 0 {
				rs[0] = unicode.ToUpper(rs[0])
			}
			return string(rs), nil
		},
		"replace": func(r *renderer, s string, args []Value, kw []kwValue) (Value, error) {
			a, err := params("replace", args, kw, []string{"old", "new", "count"}, nil, nil, int64(-1))
			if err != nil {
				return nil, err
			}
			old, err := str(a[0])
			if err != nil {
				return nil, err
			}
			repl, err := str(a[1])
			if err != nil {
				return nil, err
			}
			n, _ := asInt(a[2])
			return replace(s, old, repl, n, r.limits.MaxOutput)
		},
		"find": func(_ *renderer, s string, args []Value, _ []kwValue) (Value, error) {
			return findRunes(s, args, false)
		},
		"rfind": func(_ *renderer, s string, args []Value, _ []kwValue) (Value, error) {
			return findRunes(s, args, true)
		},
		"count": func(_ *renderer, s string, args []Value, _ []kwValue) (Value, error) {
			if len(args) != 1 {
				return nil, errors.New("count takes one argument")
			}
			sub, err := str(args[0])
			if err != nil {
				return nil, err
			}
			if sub == "" {
				return int64(len([]rune(s)) + 1), nil
			}
			return int64(strings.Count(s, sub)), nil
		},
		"join": func(r *renderer, s string, args []Value, _ []kwValue) (Value, error) {
			if len(args) != 1 {
				return nil, errors.New("join takes one argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			n := 0
			for i, it := range items {
				if parts[i], err = str(it); err != nil {
					return nil, fmt.Errorf("join: sequence item %d: %w", i, err)
				}
				if n += len(parts[i]) + len(s); n > r.limits.MaxOutput+len(s) {
					return nil, fmt.Errorf("string longer than %d bytes", r.limits.MaxOutput)
				}
			}
			return strings.Join(parts, s), nil
		},
		"splitlines": func(_ *renderer, s string, _ []Value, _ []kwValue) (Value, error) {
			out := &List{}
			if s == "" {
				return out, nil
			}
			for _, l := range strings.Split(strings.TrimSuffix(normalizeNewlines(s+"\n"), "\n")+"\n", "\n") {
				out.Items = append(out.Items, l)
			}
			out.Items = out.Items[:len(out.Items)-1]
			return out, nil
		},
		"isdigit": runeTest(unicode.IsDigit),
		"isalpha": runeTest(unicode.IsLetter),
		"isalnum": runeTest(func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }),
		"isspace": runeTest(isPySpace),
		"isupper": func(_ *renderer, s string, _ []Value, _ []kwValue) (Value, error) {
			return s != strings.ToLower(s) && s == strings.ToUpper(s), nil
		},
		"islower": func(_ *renderer, s string, _ []Value, _ []kwValue) (Value, error) {
			return s != strings.ToUpper(s) && s == strings.ToLower(s), nil
		},
		"zfill": func(r *renderer, s string, args []Value, _ []kwValue) (Value, error) {
			if len(args) != 1 {
				return nil, errors.New("zfill takes one argument")
			}
			w, _ := asInt(args[0])
			if w > int64(r.limits.MaxOutput) {
				return nil, fmt.Errorf("width %d is too large", w)
			}
			n := len([]rune(s))
			if int64(n) >= w {
				return s, nil
			}
			sign := ""
			if s != "" && (s[0] == '-' || s[0] == '+') {
				sign, s = s[:1], s[1:]
			}
			return sign + strings.Repeat("0", int(w)-n) + s, nil
		},
		"removeprefix": func(_ *renderer, s string, args []Value, _ []kwValue) (Value, error) {
			if len(args) != 1 {
				return nil, errors.New("removeprefix takes one argument")
			}
			p, err := str(args[0])
			return strings.TrimPrefix(s, p), err
		},
		"removesuffix": func(_ *renderer, s string, args []Value, _ []kwValue) (Value, error) {
			if len(args) != 1 {
				return nil, errors.New("removesuffix takes one argument")
			}
			p, err := str(args[0])
			return strings.TrimSuffix(s, p), err
		},
		"center": func(r *renderer, s string, args []Value, _ []kwValue) (Value, error) {
			if len(args) < 1 {
				return nil, errors.New("center takes a width")
			}
			w, _ := asInt(args[0])
			if w > int64(r.limits.MaxOutput) {
				return nil, fmt.Errorf("width %d is too large", w)
			}
			return pyCenter(s, int(w)), nil
		},
		"format": func(r *renderer, s string, args []Value, kw []kwValue) (Value, error) {
			return strFormat(s, args, kw, r.limits.MaxOutput)
		},
	}
}

func affix(s string, args []Value, kw []kwValue, has func(string, string) bool) (Value, error) {
	a, err := params("startswith/endswith", args, kw, []string{"prefix", "start", "end"}, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	rs := []rune(s)
	lo, hi := 0, len(rs)
	if a[1] != nil || a[2] != nil {
		var b [3]*int64
		if n, ok := asInt(a[1]); ok {
			b[0] = &n
		}
		if n, ok := asInt(a[2]); ok {
			b[1] = &n
		}
		idx, _ := sliceIndices(len(rs), b)
		if len(idx) == 0 {
			lo, hi = 0, 0
		} else {
			lo, hi = idx[0], idx[len(idx)-1]+1
		}
	}
	sub := string(rs[lo:hi])
	cands := []Value{a[0]}
	if l, ok := a[0].(*List); ok && l.Tuple {
		cands = l.Items
	}
	for _, c := range cands {
		p, err := str(c)
		if err != nil {
			return nil, err
		}
		if has(sub, p) {
			return true, nil
		}
	}
	return false, nil
}

// pySplit is Python's str.split / str.rsplit.
func pySplit(s string, args []Value, kw []kwValue, fromRight bool) (Value, error) {
	a, err := params("split", args, kw, []string{"sep", "maxsplit"}, nil, int64(-1))
	if err != nil {
		return nil, err
	}
	maxsplit, _ := asInt(a[1])
	out := &List{}
	if a[0] == nil {
		fields := strings.FieldsFunc(s, isPySpace)
		if maxsplit >= 0 && int64(len(fields)) > maxsplit+1 {
			// Rejoin the tail (or head) with its original spacing.
			if !fromRight {
				rest := s
				var parts []Value
				for range maxsplit {
					rest = strings.TrimLeftFunc(rest, isPySpace)
					i := strings.IndexFunc(rest, isPySpace)
					parts = append(parts, rest[:i])
					rest = rest[i:]
				}
				rest = strings.TrimLeftFunc(rest, isPySpace)
				out.Items = append(parts, rest)
				return out, nil
			}
			rest := s
			var parts []Value
			for range maxsplit {
				rest = strings.TrimRightFunc(rest, isPySpace)
				i := strings.LastIndexFunc(rest, isPySpace)
				parts = append([]Value{rest[i+1:]}, parts...)
				rest = rest[:i+1]
			}
			rest = strings.TrimRightFunc(rest, isPySpace)
			out.Items = append([]Value{rest}, parts...)
			return out, nil
		}
		for _, f := range fields {
			out.Items = append(out.Items, f)
		}
		return out, nil
	}
	sep, err := str(a[0])
	if err != nil {
		return nil, err
	}
	if sep == "" {
		return nil, errors.New("empty separator")
	}
	var parts []string
	switch {
	case maxsplit < 0:
		parts = strings.Split(s, sep)
	case !fromRight:
		parts = strings.SplitN(s, sep, int(maxsplit)+1)
	default:
		parts = nil
		rest := s
		for range maxsplit {
			i := strings.LastIndex(rest, sep)
			if i < 0 {
				break
			}
			parts = append([]string{rest[i+len(sep):]}, parts...)
			rest = rest[:i]
		}
		parts = append([]string{rest}, parts...)
	}
	for _, p := range parts {
		out.Items = append(out.Items, p)
	}
	return out, nil
}

func stripMethod(left, right bool) strMethod {
	return func(_ *renderer, s string, args []Value, kw []kwValue) (Value, error) {
		a, err := params("strip", args, kw, []string{"chars"}, nil)
		if err != nil {
			return nil, err
		}
		return pyStrip(s, a[0], left, right)
	}
}

// pyStrip is Python's strip/lstrip/rstrip: whitespace when chars is None,
// else any of the characters in chars.
func pyStrip(s string, chars Value, left, right bool) (Value, error) {
	f := isPySpace
	if chars != nil {
		cs, err := str(chars)
		if err != nil {
			return nil, err
		}
		f = func(r rune) bool { return strings.ContainsRune(cs, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s, nil
}

func findRunes(s string, args []Value, last bool) (Value, error) {
	if len(args) < 1 {
		return nil, errors.New("find takes a substring")
	}
	sub, err := str(args[0])
	if err != nil {
		return nil, err
	}
	var i int
	if last {
		i = strings.LastIndex(s, sub)
	} else {
		i = strings.Index(s, sub)
	}
	if i < 0 {
		return int64(-1), nil
	}
	return int64(len([]rune(s[:i]))), nil
}

func runeTest(f func(rune) bool) strMethod {
	return func(_ *renderer, s string, _ []Value, _ []kwValue) (Value, error) {
		if s == "" {
			return false, nil
		}
		for _, r := range s {
			if !f(r) {
				return false, nil
			}
		}
		return true, nil
	}
}

// pyTitle is Python's str.title: the first cased letter after an uncased
// character is upper case, the others lower case.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		cased := unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
		switch {
		case cased && !prevCased:
			b.WriteRune(unicode.ToTitle(r))
		case cased:
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
		prevCased = cased
	}
	return b.String()
}

func pyCenter(s string, width int) string {
	n := len([]rune(s))
	if width <= n {
		return s
	}
	total := width - n
	left := total / 2
	if total%2 == 1 && width%2 == 1 {
		left++
	}
	return strings.Repeat(" ", left) + s + strings.Repeat(" ", total-left)
}

// strFormat is str.format with {} / {0} / {name} fields (no format specs).
// replace is strings.Replace of at most n (all if negative) occurrences,
// refused before building a result longer than limit bytes.
func replace(s, old, repl string, n int64, limit int) (Value, error) {
	m := int64(strings.Count(s, old))
	if n >= 0 {
		m = min(m, n)
	}
	if int64(len(s))+m*int64(len(repl)-len(old)) > int64(limit) {
		return nil, fmt.Errorf("string longer than %d bytes", limit)
	}
	return strings.Replace(s, old, repl, int(m)), nil
}

func strFormat(s string, args []Value, kw []kwValue, limit int) (Value, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			b.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			b.WriteByte('}')
			i++
		case c == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return nil, errors.New("format: unmatched '{'")
			}
			field := s[i+1 : i+j]
			i += j
			var v Value
			switch {
			case field == "":
				if auto >= len(args) {
					return nil, errors.New("format: not enough arguments")
				}
				v = args[auto]
				auto++
			case field[0] >= '0' && field[0] <= '9':
				n := 0
				fmt.Sscanf(field, "%d", &n)
				if n >= len(args) {
					return nil, errors.New("format: index out of range")
				}
				v = args[n]
			default:
				found := false
				for _, k := range kw {
					if k.name == field {
						v, found = k.v, true
					}
				}
				if !found {
					return nil, fmt.Errorf("format: missing argument %q", field)
				}
			}
			str := toStr(v)
			if b.Len()+len(str) > limit {
				return nil, fmt.Errorf("string longer than %d bytes", limit)
			}
			b.WriteString(str)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
