package jinja

import (
	"context"
	"errors"
	"runtime"
	"slices"
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

// TestHostileBounded renders hostile templates with the default limits
// and checks that each is refused with a clear error (one of the
// "|"-separated wants) within a second of the deadline and with a bounded
// heap.
func TestHostileBounded(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		{"list doubling", `{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`, "list longer than"},
		{"string doubling by ~", `{% set ns = namespace(s="x") %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, "string longer than"},
		{"string doubling by *", `{% set ns = namespace(s="x") %}{% for i in range(100) %}{% set ns.s = ns.s * 2 %}{% endfor %}`, "string longer than"},
		{"many large strings", `{% set big = "x" * 16000000 %}{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + [big ~ i] %}{% endfor %}`, "bytes of values"},
		{"many large lists", `{% for i in range(1000) %}{% set l = range(1000000) | list %}{% endfor %}`, "bytes of values"},
		{"join of shared strings", `{% set big = "x" * 1000000 %}{{ ([big] * 1000000) | join("") }}`, "longer than"},
		{"% format of shared strings", `{% set big = "x" * 16000000 %}{{ ("%s" * 1000) % ((big,) * 1000) }}`, "longer than"},
		{"format method of shared strings", `{% set big = "x" * 16000000 %}{{ ("{0}" * 1000).format(big) }}`, "longer than"},
		{"format filter of shared strings", `{% set big = "x" * 16000000 %}{{ "%s%s%s" | format(big, big, big) }}`, "longer than"},
		{"replace", `{{ ("x" * 1000000).replace("x", "y" * 1000) }}`, "longer than"},
		{"replace of the empty string", `{{ ("x" * 16000000).replace("", "y" * 16000000) }}`, "longer than"},
		{"replace filter", `{{ ("x" * 1000000) | replace("x", "y" * 1000) }}`, "longer than"},
		{"many slices", `{% set big = range(1000000) | list %}{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + [big[i:]] %}{% endfor %}`, "bytes of values|deadline"},
		{"characters of a long string", `{% for c in "x" * 16000000 %}{% endfor %}`, "too long to iterate"},
		{"indent", `{{ ("\n" * 1000000) | indent(" " * 1000, true, true) }}`, "longer than"},
		{"nested lists printed", `{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}`, "exceeded"},
		{"nested lists as JSON", `{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | tojson }}`, "longer than"},
		{"nested loops", `{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}`, "steps|deadline"},
		{"nested dicts compared", `{% set ns = namespace(a={}, b={}) %}{% for i in range(60) %}{% set ns.a = {"x": ns.a, "y": ns.a} %}{% set ns.b = {"x": ns.b, "y": ns.b} %}{% endfor %}{{ ns.a == ns.b }}{{ ns.a }}`, "exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm, err := Parse(c.src)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			peak := make(chan uint64)
			done := make(chan struct{})
			go func() {
				var m runtime.MemStats
				top := uint64(0)
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					runtime.ReadMemStats(&m)
					top = max(top, m.HeapAlloc)
					select {
					case <-done:
						peak <- top
						return
					case <-tick.C:
					}
				}
			}()
			start := time.Now()
			_, err = tm.Render(context.Background(), nil, Options{})
			took := time.Since(start)
			close(done)
			heap := <-peak
			if err == nil || !slices.ContainsFunc(strings.Split(c.want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) }) {
				t.Errorf("err = %v, want one containing %q", err, c.want)
			}
			if took > DefaultLimits.Timeout+overrunSlack {
				t.Errorf("refused after %v, want within %v of the %v deadline", took, overrunSlack, DefaultLimits.Timeout)
			}
			if heap > 1<<30 {
				t.Errorf("heap peaked at %d MiB, want under 1 GiB", heap>>20)
			}
			t.Logf("%v, heap peak %d MiB: %v", took, heap>>20, err)
		})
	}
}

// TestDeadlineBetweenSteps stops a template whose every step is a large
// operation within a small bound past its deadline.
func TestDeadlineBetweenSteps(t *testing.T) {
	tm, err := Parse(`{% set l = range(1000000) | list %}{% for i in range(1000000) %}{% if i in l %}{% endif %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tm.Render(context.Background(), nil, Options{Limits: Limits{Timeout: 200 * time.Millisecond}})
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("stopped after %v, want within a second of a 200ms deadline", took)
	}
}
