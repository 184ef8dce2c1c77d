// Package vecmath holds the sampler's loops over a vocabulary-wide float32
// row — the maximum, e^(x-max) in place, and the float64 sum of e^(x-max)
// — with AVX-512 and AVX2 versions in C chosen from CPUID, and the Go loops
// below as the reference and the fallback (no cgo, other CPUs). At batch 1
// on a GPU these loops over 152k logits cost as much as the model's step.
//
// The exponential is float32: n = trunc(x·log2e − 0.5), r = x − n·ln2 (two
// parts), a degree-6 Taylor polynomial of e^r, times 2^n; within 2 ulp of
// the rounded exact value, 0 where x − max < −87.33 (no longer a normal
// float32) or is NaN. Every version computes the same float32 values.
package vecmath

import "math"

// minC is the row length from which the C loops are used.
const minC = 64

// Max returns the largest element of x (NaNs are skipped; -Inf for an
// empty or all-NaN row).
func Max(x []float32) float32 {
	if len(x) >= minC {
		if m, ok := maxAt(level(), x); ok {
			return m
		}
	}
	return maxGo(x)
}

// ExpShifted sets x[i] = e^(x[i]-mx) and returns their sum in float64.
func ExpShifted(x []float32, mx float32) float64 {
	if len(x) >= minC {
		if s, ok := sumExpAt(level(), x, mx, true); ok {
			return s
		}
	}
	return sumExpGo(x, mx, true)
}

// SumExpShifted returns the float64 sum of e^(x[i]-mx), leaving x alone.
func SumExpShifted(x []float32, mx float32) float64 {
	if len(x) >= minC {
		if s, ok := sumExpAt(level(), x, mx, false); ok {
			return s
		}
	}
	return sumExpGo(x, mx, false)
}

func maxGo(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

// exp32 is the float32 exponential every version computes (x <= 0).
func exp32(x float32) float32 {
	if !(x >= -87.33) {
		return 0
	}
	ni := int32(x*1.44269504088896341 - 0.5) // x <= 0: rounds x·log2(e) to nearest
	n := float32(ni)
	r := x - n*0.693145751953125 - n*1.42860682030941723212e-6 // |r| <= ln2/2
	r2 := r * r
	p := (1 + r) + r2*((0.5+r*(1.0/6))+r2*((1.0/24+r*(1.0/120))+r2*(1.0/720)))
	return p * math.Float32frombits(uint32(ni+127)<<23)
}

func sumExpGo(x []float32, mx float32, store bool) float64 {
	var s float64
	for i, v := range x {
		y := exp32(v - mx)
		if store {
			x[i] = y
		}
		s += float64(y)
	}
	return s
}
