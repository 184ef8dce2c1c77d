//go:build linux && amd64 && cgo

package cpuexperts

import (
	"testing"
	"time"
)

// TestEarlyStartBitwise checks that a phased task whose routing comes long
// after its workers started (they convert the rows while the queue thread
// routes: does every pool wait for it?) gives bitwise the output of one
// routed at once, for the int8, int4 and bf16 activations, one and two pools
// (the fused path is unaffected and checked alongside).
func TestEarlyStartBitwise(t *testing.T) {
	for _, c := range pairCases(t, []Method{AMXBF16, AMXINT8, AMXINT4}, 23, true) {
		out := forwardPair(t, c, func(cfg *Config) { cfg.testRouteDelay = 20 * time.Millisecond })
		if d := diffCount(out[0], out[1]); d > 0 {
			t.Errorf("%s: %d of %d outputs differ when the routing comes 20 ms after the workers start", c.name, d, len(out[0]))
		}
	}
}

// TestDownKernelRoundsBitwise checks that the AMX down kernels rounding
// their sums straight into the bf16 slot outputs give bitwise the output of
// the vector kernels' f32 rows rounded by a second pass (every expert below
// Config.AMXMinTokens), for the int8 and int4 cores, whose AMX and vector
// kernels give the same sums, on the phased and fused paths (where the AMX
// kernels run: the real or the emulated AMX level), with non-temporal and
// cached slot outputs. Special values (a NaN-free batch with large and tiny
// rows) take the rounding's carry and exponent edges.
func TestDownKernelRoundsBitwise(t *testing.T) {
	for _, c := range pairCases(t, []Method{AMXINT8, AMXINT4}, 29, true) {
		for i := range c.x {
			switch i % 97 {
			case 0:
				c.x[i] *= 1e4
			case 1:
				c.x[i] *= 1e-4
			}
		}
		for _, cached := range []bool{false, true} {
			c.ref = nil // no reference for the scaled rows: bitwise against each other only
			c.base = func(cfg *Config) { cfg.SlotOutputsCached = cached }
			out := forwardPair(t, c, func(cfg *Config) { cfg.AMXMinTokens = 1 << 20 })
			if d := diffCount(out[0], out[1]); d > 0 {
				t.Errorf("%s/cached=%v: %d of %d outputs differ between the kernel's rounding and a second pass", c.name,
					cached, d, len(out[0]))
			}
		}
	}
}
