package modelconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// object is a JSON object being read field by field; problems accumulate in
// errs with the field's dotted path, so one pass reports them all.
type object struct {
	path string // "" for the top level, else "text_config." etc.
	m    map[string]json.RawMessage
	errs *[]error
}

func newObject(path string, data []byte, errs *[]error) (object, error) {
	o := object{path: path, errs: errs}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&o.m); err != nil {
		return o, err
	}
	if o.m == nil {
		return o, fmt.Errorf("is null, not an object")
	}
	return o, nil
}

func (o object) has(name string) bool {
	v, ok := o.m[name]
	return ok && string(v) != "null"
}

func (o object) fail(name, format string, args ...any) {
	*o.errs = append(*o.errs, fmt.Errorf("%s%s: %s", o.path, name, fmt.Sprintf(format, args...)))
}

// sub returns the nested object name, or ok=false if absent.
func (o object) sub(name string) (object, bool) {
	if !o.has(name) {
		return object{}, false
	}
	s, err := newObject(o.path+name+".", o.m[name], o.errs)
	if err != nil {
		o.fail(name, "not an object: %v", err)
		return object{}, false
	}
	return s, true
}

// parseInt reads an integer that fits in 32 bits (integral floats such as
// 4.0 too); the error says what is wrong with raw.
func parseInt(raw json.RawMessage) (int, error) {
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0, fmt.Errorf("%s is not an integer", raw)
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(n), 64)
		if ferr != nil || f != math.Trunc(f) {
			return 0, fmt.Errorf("%s is not an integer", raw)
		}
		if math.Abs(f) > math.MaxInt32 {
			return 0, fmt.Errorf("%s is out of range (at most %d in magnitude)", raw, math.MaxInt32)
		}
		v = int64(f)
	}
	if v > math.MaxInt32 || v < math.MinInt32 {
		return 0, fmt.Errorf("%s is out of range (at most %d in magnitude)", raw, math.MaxInt32)
	}
	return int(v), nil
}

// intField reads a required positive integer.
func (o object) intField(name string) int {
	if !o.has(name) {
		o.fail(name, "missing")
		return 0
	}
	v, err := parseInt(o.m[name])
	if err != nil {
		o.fail(name, "%v", err)
		return 0
	}
	if v <= 0 {
		o.fail(name, "must be positive, is %d", v)
	}
	return v
}

// optInt reads an optional integer, returning def when absent.
func (o object) optInt(name string, def int) int {
	if !o.has(name) {
		return def
	}
	v, err := parseInt(o.m[name])
	if err != nil {
		o.fail(name, "%v", err)
		return def
	}
	return v
}

func (o object) optFloat(name string, def float64) float64 {
	if !o.has(name) {
		return def
	}
	var n json.Number
	if json.Unmarshal(o.m[name], &n) != nil {
		o.fail(name, "%s is not a number", o.m[name])
		return def
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		o.fail(name, "%s is not a finite number", o.m[name])
		return def
	}
	return f
}

func (o object) optBool(name string, def bool) bool {
	if !o.has(name) {
		return def
	}
	var b bool
	if json.Unmarshal(o.m[name], &b) != nil {
		o.fail(name, "%s is not a boolean", o.m[name])
		return def
	}
	return b
}

func (o object) optString(name, def string) string {
	if !o.has(name) {
		return def
	}
	var s string
	if json.Unmarshal(o.m[name], &s) != nil {
		o.fail(name, "%s is not a string", o.m[name])
		return def
	}
	return s
}

func (o object) optStrings(name string) []string {
	if !o.has(name) {
		return nil
	}
	var s []string
	if json.Unmarshal(o.m[name], &s) != nil {
		o.fail(name, "is not a list of strings")
		return nil
	}
	return s
}

func (o object) optInts(name string) []int {
	if !o.has(name) {
		return nil
	}
	var raw []json.RawMessage
	if json.Unmarshal(o.m[name], &raw) != nil {
		o.fail(name, "is not a list of integers")
		return nil
	}
	out := make([]int, len(raw))
	for i, r := range raw {
		v, err := parseInt(r)
		if err != nil {
			o.fail(name, "element %d: %v", i, err)
			return nil
		}
		out[i] = v
	}
	return out
}

// optIntOrInts reads a field that HF allows to be one integer or a list
// (eos_token_id).
func (o object) optIntOrInts(name string) []int {
	if !o.has(name) {
		return nil
	}
	if v, err := parseInt(o.m[name]); err == nil {
		return []int{v}
	}
	return o.optInts(name)
}
