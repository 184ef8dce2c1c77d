package jinja

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzTemplate parses and renders arbitrary template sources: errors are
// fine, panics and runaway rendering are not.
func FuzzTemplate(f *testing.F) {
	matches, _ := filepath.Glob(filepath.Join("..", "testdata", "templates", "*.jinja"))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil {
			f.Add(string(b))
		}
	}
	for _, s := range []string{"{{ x }}", "{% for a in b %}{{ loop.index }}{% endfor %}", "{%- set ns = namespace(a=1) -%}{{ ns.a | tojson }}", "{{ 'a'[::-1] }}", "{% macro m(a=1) %}{{ a }}{% endmacro %}{{ m() }}", "{# c #}{% raw %}{{{% endraw %}"} {
		f.Add(s)
	}
	lim := Limits{MaxOutput: 1 << 16, MaxSteps: 20_000, MaxItems: 1000, MaxCallDepth: 20, Timeout: time.Second}
	msgs, _ := FromJSON([]byte(`[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"<think>r</think>a","tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]},{"role":"tool","content":"t"}]`))
	f.Fuzz(func(t *testing.T, src string) {
		tm, err := Parse(src)
		if err != nil {
			return
		}
		_, _ = tm.Render(context.Background(), map[string]Value{"messages": msgs, "x": int64(3), "b": NewList("a", int64(1))}, Options{Limits: lim})
	})
}
