package server

import (
	"bytes"
	"encoding/json"
	"errors"
)

// jsonField is one member of a JSON object.
type jsonField struct {
	key string
	val json.RawMessage
}

// jsonObject is a JSON object that keeps its members in the order given,
// so that a request's messages and tools reach the chat template (and its
// tojson) with the client's key order, as a Python dict would.
type jsonObject []jsonField

var errNotObject = errors.New("not a JSON object")

// parseObject reads a JSON object. A key given twice keeps its first
// position and its last value, as Python's json.loads does.
func parseObject(raw json.RawMessage) (jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errNotObject
	}
	o := jsonObject{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errNotObject
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o.set(key, v)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	return o, nil
}

// get returns the value of key.
func (o jsonObject) get(key string) (json.RawMessage, bool) {
	for _, f := range o {
		if f.key == key {
			return f.val, true
		}
	}
	return nil, false
}

// set replaces key's value in place, or appends the key.
func (o *jsonObject) set(key string, v json.RawMessage) {
	for i := range *o {
		if (*o)[i].key == key {
			(*o)[i].val = v
			return
		}
	}
	*o = append(*o, jsonField{key, v})
}

// setString sets key to a JSON string.
func (o *jsonObject) setString(key, s string) {
	b, _ := json.Marshal(s)
	o.set(key, b)
}

// dropNulls removes the members whose value is null.
func (o *jsonObject) dropNulls() {
	out := (*o)[:0]
	for _, f := range *o {
		if !isNull(f.val) {
			out = append(out, f)
		}
	}
	*o = out
}

// MarshalJSON writes the members in order.
func (o jsonObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(f.val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// jsonArray joins raw values into a JSON array.
func jsonArray(items []json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteByte(']')
	return b.Bytes()
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}
