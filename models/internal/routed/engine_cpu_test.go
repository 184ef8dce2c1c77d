//go:build linux && amd64 && cgo

package routed

import (
	"strings"
	"testing"
	"time"
)

// TestEnvDuration: the engine's duration knobs from the environment: unset
// is the default (0), a Go duration is taken, a negative or malformed one is
// refused with the variable's name.
func TestEnvDuration(t *testing.T) {
	const name = "KT_TEST_ENV_DURATION"
	for _, tc := range []struct {
		v    string
		want time.Duration
		bad  bool
	}{{"", 0, false}, {"300us", 300 * time.Microsecond, false}, {"1.5ms", 1500 * time.Microsecond, false}, {"-1s", 0, true}, {"soon", 0, true}} {
		t.Setenv(name, tc.v)
		d, err := envDuration(name)
		if (err != nil) != tc.bad || d != tc.want {
			t.Errorf("%s=%q: %v, %v", name, tc.v, d, err)
		}
		if err != nil && !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %q does not name the variable", name, tc.v, err)
		}
	}
}
