package jinja

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestUntrusted checks that hostile templates fail with a clear error
// instead of reading files, running forever or eating memory.
func TestUntrusted(t *testing.T) {
	small := Limits{MaxOutput: 1 << 16, MaxSteps: 100_000, MaxItems: 10_000, MaxCallDepth: 20, Timeout: 2 * time.Second}
	for _, c := range []struct {
		name, src, want string
	}{
		{"include", `{% include "/etc/passwd" %}`, "not allowed"},
		{"import", `{% import "x" as y %}`, "not allowed"},
		{"extends", `{% extends "base" %}`, "not allowed"},
		{"nested loops", `{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}`, "steps"},
		{"huge range", `{{ range(100000000) | length }}`, "range"},
		{"output bomb", `{% for a in range(10000) %}{{ "x" * 1000 }}{% endfor %}`, "output exceeded"},
		{"string bomb", `{{ "x" * 100000000 }}`, "longer than"},
		{"list bomb", `{{ ([1] * 100000000) | length }}`, "longer than"},
		{"recursion", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, "nested more than"},
		{"doubling", `{% set ns = namespace(s="x") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, "longer than"},
		{"deep expression", strings.Repeat("{{ ", 1) + strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000) + " }}", "nested"},
		{"deep blocks", strings.Repeat("{% if true %}", 5000) + strings.Repeat("{% endif %}", 5000), "nested"},
		{"raise", `{{ raise_exception("no") }}`, "no"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm, err := Parse(c.src)
			if err == nil {
				_, err = tm.Render(context.Background(), nil, Options{Limits: small})
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestRaiseIsDistinguishable(t *testing.T) {
	tm, err := Parse(`{{ raise_exception("bad role") }}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tm.Render(context.Background(), nil, Options{})
	if !errors.Is(err, ErrRaised) || err.Error() != "bad role" {
		t.Fatalf("err = %v", err)
	}
}

func TestContextCancel(t *testing.T) {
	tm, err := Parse(`{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = tm.Render(ctx, nil, Options{Limits: Limits{MaxSteps: 1 << 40}})
	if err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("err = %v, want a cancellation", err)
	}
}

func TestSourceTooLarge(t *testing.T) {
	if _, err := Parse(strings.Repeat("x", MaxSourceSize+1)); err == nil {
		t.Fatal("no error for an oversized template")
	}
}
