package main

import (
	"strings"
	"testing"
)

// TestLayerwiseAllowed checks kt generate's checks of
// --kt-gpu-prefill-token-threshold and --kt-enable-dynamic-expert-update.
func TestLayerwiseAllowed(t *testing.T) {
	engine := len(cpuExpertMethods()) > 0
	for _, c := range []struct {
		name            string
		t               int
		dynamic         bool
		device, experts string
		want            string // "" accepted (in a build with the CPU expert engine)
	}{
		{"off", 0, false, "cpu", "auto", ""},
		{"negative", -1, false, "cuda", "BF16", "must not be negative"},
		{"dynamic without threshold", 0, true, "cuda", "BF16", "set --kt-gpu-prefill-token-threshold too"},
		{"on the CPU", 512, false, "cpu", "BF16", "needs a GPU"},
		{"GPU alone", 512, false, "cuda", "auto", "give --kt-method"},
		{"GPU alone, backend op", 512, true, "cuda", "backend", "give --kt-method"},
		{"hybrid", 512, false, "cuda", "BF16", ""},
		{"hybrid with update", 512, true, "auto", "AMXINT4", ""},
	} {
		err := layerwiseAllowed(c.t, c.dynamic, c.device, c.experts)
		want := c.want
		if want == "" && c.t > 0 && !engine {
			want = "no CPU expert engine"
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want %q", c.name, err, want)
		}
	}
}

// TestGenerateLayerwiseFlags checks that kt generate takes the flags and
// refuses them where they cannot apply, before loading anything.
func TestGenerateLayerwiseFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kt-enable-dynamic-expert-update"}, "set --kt-gpu-prefill-token-threshold too"},
		{[]string{"--device", "cpu", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "4"}, "needs a GPU"},
		{[]string{"--device", "cuda", "--kt-gpu-prefill-token-threshold", "4"}, "give --kt-method"},
	} {
		a := append([]string{"generate", "--model-path", "/nonexistent", "--input-ids", "5", "--max-new-tokens", "1"}, c.args...)
		if _, _, err := runKT(t, a...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}
