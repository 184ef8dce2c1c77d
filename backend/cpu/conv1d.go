package cpu

import (
	"fmt"
	"math"
)

// CausalConv1D applies a depthwise causal convolution and SiLU to n rows of
// x ([n, channels]), continuing from state ([kernel-1, channels], the
// previous inputs, oldest first), and advances state. w is [channels,
// kernel]. Output row t is siluF32(Σ_k w[c,k]·x[t-kernel+1+k, c]), as
// transformers' causal_conv1d_fn with padding kernel-1 computes it when the
// state is zero at the start of the sequence.
func CausalConv1D(x []float32, n, channels int, w []float32, kernel int, state, out []float32) error {
	if n < 0 || channels <= 0 || kernel < 1 {
		return fmt.Errorf("causal conv1d: bad shape: %d rows, %d channels, kernel %d", n, channels, kernel)
	}
	if len(x) < n*channels || len(out) < n*channels || len(w) != channels*kernel || len(state) != (kernel-1)*channels {
		return fmt.Errorf("causal conv1d: %d rows × %d channels, kernel %d do not fit x (%d), out (%d), w (%d) or state (%d)",
			n, channels, kernel, len(x), len(out), len(w), len(state))
	}
	hist := kernel - 1
	// input returns the row at offset s relative to the call's first row;
	// negative offsets come from the state.
	input := func(s int) []float32 {
		if s < 0 {
			return state[(hist+s)*channels : (hist+s+1)*channels]
		}
		return x[s*channels : (s+1)*channels]
	}
	for t := 0; t < n; t++ {
		o := out[t*channels : (t+1)*channels]
		for c := range o {
			o[c] = 0
		}
		for kk := 0; kk < kernel; kk++ {
			src := input(t - hist + kk)
			for c := range o {
				o[c] += w[c*kernel+kk] * src[c]
			}
		}
		for c, v := range o {
			o[c] = siluF32(v)
		}
	}
	// Shift the state: keep the last hist rows of (state ++ x).
	if hist > 0 {
		if n >= hist {
			copy(state, x[(n-hist)*channels:n*channels])
		} else {
			copy(state, state[n*channels:])
			copy(state[(hist-n)*channels:], x[:n*channels])
		}
	}
	return nil
}

// siluF32 is x·sigmoid(x).
func siluF32(x float32) float32 {
	return x / (1 + float32(math.Exp(float64(-x))))
}
