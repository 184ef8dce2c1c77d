package peft

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// maxConfigBytes bounds adapter_config.json; real ones are a few KiB.
const maxConfigBytes = 16 << 20

// Config is a PEFT adapter_config.json kept field by field, so that fields kt
// does not know survive a rewrite unchanged. Values are JSON values decoded
// with numbers kept as json.Number.
type Config struct {
	fields map[string]any
}

// NewConfig returns an empty Config.
func NewConfig() *Config { return &Config{fields: map[string]any{}} }

// ParseConfig decodes an adapter_config.json document, which must be a JSON
// object.
func ParseConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid JSON: trailing data after the top-level object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("top-level value is %s, want an object", jsonKind(v))
	}
	return &Config{fields: m}, nil
}

// ReadConfig reads and parses the adapter_config.json at path.
func ReadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxConfigBytes)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	return &Config{fields: cloneValue(c.fields).(map[string]any)}
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = cloneValue(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = cloneValue(x)
		}
		return s
	case []string:
		return append([]string(nil), t...)
	}
	return v
}

// Get returns the value of a top-level field.
func (c *Config) Get(key string) (any, bool) {
	v, ok := c.fields[key]
	return v, ok
}

// Set sets a top-level field. v must be a value Marshal can write: nil, bool,
// string, json.Number, Float, int, int64, []string, []any or map[string]any.
func (c *Config) Set(key string, v any) { c.fields[key] = v }

// SetDefault sets key to v unless the field is present.
func (c *Config) SetDefault(key string, v any) {
	if _, ok := c.fields[key]; !ok {
		c.fields[key] = v
	}
}

// Int returns an integer field; ok is false when it is absent or not an
// integer.
func (c *Config) Int(key string) (int64, bool) {
	n, isNum := c.fields[key].(json.Number)
	if !isNum {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// TargetModules returns the "target_modules" entries reduced to their last
// dotted component, as the KT converter merges them. ok is false when the
// field is absent or not a list (PEFT also allows a regex string, which the
// converter ignores).
func (c *Config) TargetModules() (names []string, ok bool) {
	list, isList := c.fields["target_modules"].([]any)
	if !isList {
		return nil, false
	}
	for _, x := range list {
		s, isStr := x.(string)
		if !isStr {
			b, err := MarshalPython(x)
			if err != nil {
				continue
			}
			s = string(b)
		}
		names = append(names, LastComponent(s))
	}
	return names, true
}

// Marshal writes c the way Python's json.dump(c, indent=2, sort_keys=True)
// followed by a newline does, so converted adapters match the reference
// converter's byte for byte.
func (c *Config) Marshal() ([]byte, error) {
	b, err := MarshalPython(c.fields)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
