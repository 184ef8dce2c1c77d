//go:build cgo

package cuda

import "testing"

// TestMoEGroupedEnv checks how KT_CUDA_MOE_GROUPED sets the grouped MoE
// path's threshold: unset the default, 0 never, a count that count, and
// anything else a clear error.
func TestMoEGroupedEnv(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int
		bad  bool
	}{{"", 0, false}, {"0", -1, false}, {"1", 1, false}, {"8192", 8192, false}, {"-3", 0, true}, {"many", 0, true}} {
		t.Setenv(MoEGroupedEnv, c.v)
		got, err := moeGroupedEnv()
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%s=%q: %d, %v; want %d (error: %v)", MoEGroupedEnv, c.v, got, err, c.want, c.bad)
		}
	}
}
