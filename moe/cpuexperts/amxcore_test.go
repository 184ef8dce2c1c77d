//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"
)

// TestAMXCoreEmulated runs the AMX prefill kernel body (kern_amx_core.h)
// over emulated tiles, so its loop structure, addressing and knobs are
// tested on CPUs without AMX: every shape is checked against a float64
// reference, and every knob setting (K block, L1 tile prefetch and which
// tiles, the next-call L2 prefetch, non-temporal C, tile-order or row-major
// activations) must give bitwise the result of the plain setting.
func TestAMXCoreEmulated(t *testing.T) {
	if !DetectFeatures().AVX512 {
		t.Skip("the emulated kernel's epilogue needs AVX-512F")
	}
	knobs := []amxKnobs{
		{kch: -1, pf: 0, pfm: 3, tiled: true}, // the reference setting
		{kch: -1, pf: 1, pfm: 3, nxl: 4, tiled: true},
		{kch: 1, pf: 2, pfm: 1, nxl: 64, tiled: true, nt: true},
		{kch: 3, pf: 1, pfm: 2, nxl: 1, tiled: false},
		{kch: 2, pf: 0, pfm: 3, nxl: 0, tiled: false, nt: true},
	}
	shapes := [][3]int{{1, 192, 16}, {17, 256, 32}, {40, 192, 32}, {64, 128, 16}, {100, 384, 32}}
	if testing.Short() {
		shapes = shapes[:3]
	}
	for _, i8 := range []bool{false, true} {
		tol := 1e-5
		if i8 {
			tol = 1e-6 // integer sums are exact; the scale products round
		}
		for _, sh := range shapes {
			m, k, nn := sh[0], sh[1], sh[2]
			var ref []float32
			for _, kn := range knobs {
				name := fmt.Sprintf("i8=%v/m=%d/k=%d/nn=%d/%+v", i8, m, k, nn, kn)
				out, e, err := emuAMXRun(i8, m, k, nn, kn)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if e > tol {
					t.Errorf("%s: error %.3g against the float64 reference, want <= %g", name, e, tol)
				}
				if ref == nil {
					ref = out
					continue
				}
				for j := range ref {
					if math.Float32bits(ref[j]) != math.Float32bits(out[j]) {
						t.Fatalf("%s: C[%d] = %g, the plain setting gives %g", name, j, out[j], ref[j])
					}
				}
			}
		}
	}
	if _, _, err := emuAMXRun(false, 8, 100, 16, amxKnobs{}); err == nil {
		t.Error("k = 100 (not a multiple of 64) accepted")
	}
}
