package settings

import (
	"strings"
	"testing"
	"time"
)

func TestGet(t *testing.T) {
	b := Bool{Info{"KT_TEST_SETTING", "1", "bool", "", Tests}}
	d := Duration{Info{"KT_TEST_SETTING", "", "duration", "", Tests}}
	n := Int{Info{"KT_TEST_SETTING", "2", "int", "", Tests}, 1, 2}
	e := Enum{Info{"KT_TEST_SETTING", "auto", "enum", "", Tests}, []string{"auto", "amx"}}
	for _, c := range []struct {
		env  string
		get  func() (any, error)
		want any
		err  string
	}{
		{"", func() (any, error) { return b.Get() }, true, ""},
		{"0", func() (any, error) { return b.Get() }, false, ""},
		{"maybe", func() (any, error) { return b.Get() }, false, "want 1 or 0"},
		{"", func() (any, error) { return d.Get() }, time.Duration(0), ""},
		{"300us", func() (any, error) { return d.Get() }, 300 * time.Microsecond, ""},
		{"-1s", func() (any, error) { return d.Get() }, time.Duration(0), "want a duration"},
		{"", func() (any, error) { return n.Get() }, 2, ""},
		{"1", func() (any, error) { return n.Get() }, 1, ""},
		{"3", func() (any, error) { return n.Get() }, 0, "from 1 to 2"},
		{"", func() (any, error) { return e.Get() }, "auto", ""},
		{"AMX", func() (any, error) { return e.Get() }, "amx", ""},
		{"avx", func() (any, error) { return e.Get() }, "", "one of auto, amx"},
	} {
		t.Setenv("KT_TEST_SETTING", c.env)
		got, err := c.get()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "KT_TEST_SETTING") {
				t.Errorf("%q: error %v, want one naming the variable and %q", c.env, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %v, %v; want %v", c.env, got, err, c.want)
		}
	}
}

func TestPaths(t *testing.T) {
	p := Paths{Info{"KT_TEST_SETTING", "", "paths", "", Tests}}
	t.Setenv("KT_TEST_SETTING", "/a::/b")
	if got := p.Get(); len(got) != 2 || got[0] != "/a" || got[1] != "/b" {
		t.Errorf("got %q", got)
	}
}

// TestAllDeclared checks every listed setting has a name, a help line and
// a known type, and that no name is declared twice.
func TestAllDeclared(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range All() {
		if s.Name == "" || s.Help == "" || s.Type == "" || (s.Scope != User && s.Scope != Tests) {
			t.Errorf("incomplete declaration %+v", s)
		}
		if seen[s.Name] {
			t.Errorf("%s declared twice", s.Name)
		}
		seen[s.Name] = true
	}
}
