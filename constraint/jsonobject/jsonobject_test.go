package jsonobject

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		s                string
		prefix, complete bool
	}{
		{"", true, false},
		{" {", true, false},
		{"{}", true, true},
		{"{} ", true, true},
		{"{}  ", false, false}, // trailing whitespace is bounded
		{"{}x", false, false},
		{"[]", false, false}, // json_object: the top level is an object
		{`{"a"`, true, false},
		{`{"a":1`, true, false},
		{`{"a":1}`, true, true},
		{`{"a":-0.5e+10,"b":[true,false,null,{"c":"\u00e9\n"}]}`, true, true},
		{`{"a":01}`, false, false},
		{`{"a":1.}`, false, false},
		{`{"a":tru`, true, false},
		{`{"a":trux`, false, false},
		{`{a:1}`, false, false},
		{`{"a" 1}`, false, false},
		{`{"a":1,}`, false, false},
		{`{"a":[1,]}`, false, false},
		{`{"a":"x` + "\n", false, false},
		{`{"a":"\q"}`, false, false},
		{`{"a":"\u12g4"}`, false, false},
		{`{"a":1]`, false, false},
		{"{\"k\":\"日本\"}", true, true},
	} {
		p, c := Valid(tc.s)
		if p != tc.prefix || c != tc.complete {
			t.Errorf("%q: prefix %v complete %v, want %v %v", tc.s, p, c, tc.prefix, tc.complete)
		}
		if c && !json.Valid([]byte(tc.s)) {
			t.Errorf("%q: complete but encoding/json disagrees", tc.s)
		}
	}
}

// bytesVocab: ids 0-255 are bytes, 256 is EOS, 257 is special.
type bytesVocab struct{}

func (bytesVocab) TokenBytes(id int32) ([]byte, bool) {
	if id < 256 {
		return []byte{byte(id)}, true
	}
	if id == 257 {
		return []byte("<|im_end|>"), true
	}
	return nil, false
}
func (bytesVocab) IsSpecial(id int32) bool { return id >= 256 }

func TestConstraint(t *testing.T) {
	c := New(bytesVocab{}, []int32{256})
	if c.Allow(256) || c.Allow(257) || c.Allow('x') || !c.Allow('{') || !c.Allow(' ') {
		t.Fatal("start state")
	}
	for _, ch := range []byte(`{"a":"`) {
		if !c.Allow(int32(ch)) {
			t.Fatalf("%q refused", ch)
		}
		c.Advance(int32(ch))
	}
	if c.Allow(257) {
		t.Error("special token allowed inside a string")
	}
	for _, ch := range []byte(`<x>"}`) {
		c.Advance(int32(ch))
	}
	if !c.Complete() || !c.Allow(256) || c.Allow('}') {
		t.Errorf("complete %v, eos %v", c.Complete(), c.Allow(256))
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2.5e3,"x\"y",{"b":null}]}`, `{"a":tr`, " {\n\"k\": -0}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, c := Valid(s)
		if c && (!json.Valid([]byte(s)) || !strings.HasPrefix(strings.TrimLeft(s, " \t\r\n"), "{")) {
			t.Fatalf("%q accepted as a complete object", s)
		}
		if c && !p {
			t.Fatal("complete but not a prefix")
		}
		// Every prefix of an accepted string is accepted.
		if p {
			for i := range len(s) {
				if ok, _ := Valid(s[:i]); !ok {
					t.Fatalf("%q accepted but its prefix %q is not", s, s[:i])
				}
			}
		}
	})
}
