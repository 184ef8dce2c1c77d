package cpu

import (
	"fmt"
	"math"
)

// GatedRMSNorm computes rmsnorm(x)·w·siluF32(z) over rows of width dim, as
// Qwen3-Next's RMSNormGated does (norm first, then the gate). out may alias x.
func GatedRMSNorm(x, z, w []float32, rows, dim int, eps float32, out []float32) error {
	if rows < 0 || dim <= 0 || len(x) < rows*dim || len(z) < rows*dim || len(out) < rows*dim || len(w) != dim {
		return fmt.Errorf("gated rmsnorm: %d rows of %d do not fit x (%d), z (%d), w (%d) or out (%d)",
			rows, dim, len(x), len(z), len(w), len(out))
	}
	for r := 0; r < rows; r++ {
		xr, zr, or := x[r*dim:(r+1)*dim], z[r*dim:(r+1)*dim], out[r*dim:(r+1)*dim]
		inv := gatedRMSInv(xr, eps)
		for i, v := range xr {
			or[i] = w[i] * (v * inv) * siluF32(zr[i])
		}
	}
	return nil
}

// GemmaRMSNorm computes x·rsqrt(mean(x²)+eps)·(1+w) over rows of width dim:
// the zero-centred RMSNorm of Qwen3-Next and Qwen3.5. out may alias x.
func GemmaRMSNorm(x, w []float32, rows, dim int, eps float32, out []float32) error {
	if rows < 0 || dim <= 0 || len(x) < rows*dim || len(out) < rows*dim || len(w) != dim {
		return fmt.Errorf("gemma rmsnorm: %d rows of %d do not fit x (%d), w (%d) or out (%d)", rows, dim, len(x), len(w), len(out))
	}
	for r := 0; r < rows; r++ {
		xr, or := x[r*dim:(r+1)*dim], out[r*dim:(r+1)*dim]
		inv := gatedRMSInv(xr, eps)
		for i, v := range xr {
			or[i] = (v * inv) * (1 + w[i])
		}
	}
	return nil
}

// gatedRMSInv returns rsqrt(mean(x²)+eps), accumulated in float64.
func gatedRMSInv(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}
