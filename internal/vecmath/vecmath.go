// Package vecmath holds the sampler's loops over a vocabulary-wide float32
// row — the maximum, the row scaled in place with its maximum, e^(x-max)
// in place, the float64 sum of e^(x-max), whole or per block, and the
// indices of the values at or above a threshold — with
// AVX-512 and AVX2 versions in C chosen from CPUID, and the Go loops
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

// ScaleMax sets x[i] = x[i]·s (each product rounded as Go rounds it) and
// returns the largest (NaNs are skipped; -Inf for an empty or all-NaN row).
func ScaleMax(x []float32, s float32) float32 {
	if len(x) >= minC {
		if m, ok := scaleMaxAt(level(), x, s); ok {
			return m
		}
	}
	return scaleMaxGo(x, s)
}

// Blocks is the number of blocks of bs values a row of n values has.
func Blocks(n, bs int) int { return (n + bs - 1) / bs }

// ExpShiftedBlocks sets x[i] = e^(x[i]-mx) as ExpShifted does, stores the
// float64 sum of each block of bs values in sums (Blocks(len(x), bs) of
// them; the last block may be shorter) and returns the sum of the block
// sums in block order. A sampler draws with them: the block a uniform
// point of the total falls in, then the value within that block.
func ExpShiftedBlocks(x []float32, mx float32, bs int, sums []float64) float64 {
	if bs < 1 || len(sums) < Blocks(len(x), bs) {
		panic("vecmath: ExpShiftedBlocks: bad block size or too few sums")
	}
	if len(x) >= minC && bs >= minC {
		if s, ok := expBlocksAt(level(), x, mx, bs, sums); ok {
			return s
		}
	}
	return expBlocksGo(x, mx, bs, sums)
}

// Above appends to out[:0] the indices of x's values at or above thr (NaNs
// never), in order, and returns it; out is grown to len(x) when shorter.
func Above(x []float32, thr float32, out []int32) []int32 {
	if cap(out) < len(x) {
		out = make([]int32, len(x))
	}
	out = out[:len(x)]
	if len(x) >= minC {
		if r, ok := aboveAt(level(), x, thr, out); ok {
			return r
		}
	}
	return aboveGo(x, thr, out[:0])
}

func aboveGo(x []float32, thr float32, out []int32) []int32 {
	for i, v := range x {
		if v >= thr {
			out = append(out, int32(i))
		}
	}
	return out
}

func scaleMaxGo(x []float32, s float32) float32 {
	m := float32(math.Inf(-1))
	for i := range x {
		x[i] *= s
		if x[i] > m {
			m = x[i]
		}
	}
	return m
}

func expBlocksGo(x []float32, mx float32, bs int, sums []float64) float64 {
	var total float64
	for k, b0 := 0, 0; b0 < len(x); k, b0 = k+1, b0+bs {
		s := sumExpGo(x[b0:min(b0+bs, len(x))], mx, true)
		sums[k] = s
		total += s
	}
	return total
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
