//go:build linux && amd64 && cgo

package cpuexperts

import (
	"math"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// f32ToE4M3 must round every representable value to itself and land on a nearest neighbour otherwise.
func TestF32ToE4M3(t *testing.T) {
	for b := 0; b < 256; b++ {
		if b&0x7f == 0x7f {
			continue // NaN
		}
		v := float64(tensor.F8E4M3ToF32(byte(b)))
		got := f32ToE4M3(v)
		if tensor.F8E4M3ToF32(got) != float32(v) {
			t.Errorf("value %g (0x%02x) rounds to 0x%02x", v, b, got)
		}
	}
	for _, v := range []float64{0.3, -1.7, 100.1, 1e-3, 5e-4, 447, 1000} {
		got := float64(tensor.F8E4M3ToF32(f32ToE4M3(v)))
		best := math.Inf(1)
		for b := 0; b < 0x7f; b++ {
			best = math.Min(best, math.Abs(float64(tensor.F8E4M3ToF32(byte(b)))-math.Abs(v)))
		}
		if math.Abs(math.Abs(got)-math.Abs(v)) > best+1e-12 {
			t.Errorf("%g -> %g, nearest is %g away", v, got, best)
		}
	}
}
