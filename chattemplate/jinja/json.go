package jinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/ktserve/kt/internal/pyjson"
)

// maxJSONDepth bounds the nesting of JSON values read or written.
const maxJSONDepth = 512

// FromJSON decodes JSON into template values the way Python's json.loads
// does: objects keep their key order, integers stay integers and numbers
// with a fraction or exponent become floats.
func FromJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

func decodeJSON(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("JSON nested more than %d levels deep", maxJSONDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is %T", kt)
				}
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if err := d.Set(k, v); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token()
			return d, err
		case '[':
			l := &List{}
			for dec.More() {
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.Items = append(l.Items, v)
			}
			_, err := dec.Token()
			return l, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		s := t.String()
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return i, nil
			}
			// Python ints have no limit; keep the exact value for printing.
			if b, ok := new(big.Int).SetString(s, 10); ok && len(s) <= 4300 {
				return b, nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", t)
}

// FromGo converts Go values (nil, bool, numbers, string, []any,
// map[string]any with sorted keys, and Values) to template values.
func FromGo(v any) (Value, error) {
	switch v := v.(type) {
	case nil, bool, int64, float64, string, Undefined, *List, *Dict, *Namespace:
		return v, nil
	case int:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case float32:
		return float64(v), nil
	case []any:
		l := &List{Items: make([]Value, len(v))}
		for i, it := range v {
			x, err := FromGo(it)
			if err != nil {
				return nil, err
			}
			l.Items[i] = x
		}
		return l, nil
	case []string:
		l := &List{Items: make([]Value, len(v))}
		for i, it := range v {
			l.Items[i] = it
		}
		return l, nil
	case map[string]any:
		d := NewDict()
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			x, err := FromGo(v[k])
			if err != nil {
				return nil, err
			}
			_ = d.Set(k, x)
		}
		return d, nil
	case json.RawMessage:
		return FromJSON(v)
	}
	return nil, fmt.Errorf("cannot use %T as a template value", v)
}

// PythonJSON decodes JSON text as Python's json.loads does and encodes it
// again as json.dumps(value, ensure_ascii=ensureASCII) does: keys in their
// order, ", " and ": " between items, numbers as Python prints them. Empty
// reports a value Python treats as false (an empty object, array or string,
// zero, false or null).
func PythonJSON(data []byte, ensureASCII bool) (out string, empty bool, err error) {
	v, err := FromJSON(data)
	if err != nil {
		return "", false, err
	}
	out, err = toJSON(v, jsonOptions{ensureASCII: ensureASCII, itemSep: ", ", keySep: ": "})
	return out, !truth(v), err
}

// jsonOptions are the arguments of Python's json.dumps that tojson takes.
type jsonOptions struct {
	ensureASCII bool
	indent      *string // nil: no newlines
	itemSep     string
	keySep      string
	sortKeys    bool
}

// toJSON is Python's json.dumps.
func toJSON(v Value, o jsonOptions) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v Value, o jsonOptions, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("tojson: value nested too deeply (circular?)")
	}
	if b.Len() > maxReprLen {
		return fmt.Errorf("tojson: value longer than %d bytes", maxReprLen-1)
	}
	newline := func(d int) {
		if o.indent != nil {
			b.WriteByte('\n')
			for range d {
				b.WriteString(*o.indent)
			}
		}
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case *big.Int:
		b.WriteString(v.String())
	case float64:
		b.WriteString(jsonFloat(v))
	case string:
		pyjson.WriteString(b, v, o.ensureASCII)
	case *List:
		if len(v.Items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(depth + 1)
			if err := writeJSON(b, it, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte(']')
	case *Dict:
		if v.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		type kv struct {
			k string
			v Value
		}
		items := make([]kv, 0, v.Len())
		for i, k := range v.keys {
			var ks string
			switch k := k.(type) {
			case string:
				ks = k
			case nil:
				ks = "null"
			case bool:
				ks = strconv.FormatBool(k)
			case int64:
				ks = strconv.FormatInt(k, 10)
			case float64:
				ks = jsonFloat(k)
			default:
				return fmt.Errorf("tojson: keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			items = append(items, kv{ks, v.vals[i]})
		}
		if o.sortKeys {
			slices.SortStableFunc(items, func(a, b kv) int { return strings.Compare(a.k, b.k) })
		}
		b.WriteByte('{')
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(depth + 1)
			pyjson.WriteString(b, it.k, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := writeJSON(b, it.v, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// jsonFloat is float.__repr__ with Python json's spelling of the
// non-finite values.
func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pyFloat(f)
}
