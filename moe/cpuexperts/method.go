// Package cpuexperts is kt's CPU expert engine: it computes one MoE layer's
// routed experts on the CPU, Σ w·down(silu(gate·x) ⊙ up·x) over the experts a
// token was routed to that are not on the GPU.
//
// The hot path is C (cgo): pthread worker pools pinned to NUMA nodes, a FIFO
// task queue, and SIMD kernels for AVX2, AVX-512 (VNNI, BF16) and AMX chosen
// at run time from CPUID. Go creates, configures and destroys; Submit and
// Sync do the work without the Go
// scheduler and without allocating.
//
// Beside it, moe/expertsource reads experts from Hugging Face checkpoints,
// moe/ktformat holds the on-disk formats of pre-quantized experts, and
// moe/enginebench is kt bench's harness.
package cpuexperts

import (
	"fmt"
	"strings"
)

// Method is a CPU expert weight method, named as KTransformers names them.
type Method string

// Methods. BF16 and FP8 read Hugging Face weights in place; the AMX* and
// INT4_KGROUP methods repack (and quantize) the weights at load; RAWINT4
// repacks a pack-quantized INT4 checkpoint's codes as they are.
const (
	// BF16 uses HF bf16 weights as they are, with no copy.
	BF16 Method = "BF16"
	// AMXBF16 repacks bf16 weights into the AMX tile layout.
	AMXBF16 Method = "AMXBF16"
	// AMXINT8 quantizes to int8 with a symmetric scale per row (amax/127).
	AMXINT8 Method = "AMXINT8"
	// AMXINT4 quantizes to int4 with a symmetric scale per row (amax/112 on q·16).
	AMXINT4 Method = "AMXINT4"
	// INT4KGroup quantizes to int4 with a symmetric scale per row and group of
	// 64 or 128 columns: more accurate than AMXINT4 at ~6% more bytes.
	INT4KGroup Method = "INT4_KGROUP"
	// FP8 reads block-scaled e4m3 checkpoints (weight_scale_inv, 128x128) natively.
	FP8 Method = "FP8"
	// RAWINT4 runs compressed-tensors pack-quantized INT4 experts (Kimi-K2-Thinking:
	// symmetric, a scale per row and group of 32 columns) on their own codes and
	// scales, repacked into the engine's panels without re-quantizing.
	RAWINT4 Method = "RAWINT4"
)

// Methods lists every method the engine implements.
var Methods = []Method{BF16, AMXBF16, AMXINT8, AMXINT4, INT4KGroup, FP8, RAWINT4}

// ParseMethod maps a --kt-method value (case-insensitive) to a Method.
func ParseMethod(s string) (Method, error) {
	for _, m := range Methods {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	names := make([]string, len(Methods))
	for i, m := range Methods {
		names[i] = string(m)
	}
	return "", fmt.Errorf("unknown CPU expert method %q (known: %s)", s, strings.Join(names, ", "))
}

// ExpertBytesEstimate is about the bytes one routed expert of hidden x
// intermediate takes in method m: gate and up (rows of hidden columns) and
// down (rows of intermediate columns), scales (and the per-row methods'
// corrections) included
// (INT4_KGROUP at group 128, RAWINT4 at group 32).
func (m Method) ExpertBytesEstimate(hidden, intermediate int) int64 {
	HI := float64(hidden) * float64(intermediate)
	g := 128
	if m == RAWINT4 {
		g = 32
	}
	return int64(2*HI*m.bytesPerWeight(hidden, g) + HI*m.bytesPerWeight(intermediate, g))
}

// bytesPerWeight is the storage cost of one weight element under m
// (scales and per-row corrections included) for a group size g
// (INT4_KGROUP and RAWINT4 only).
func (m Method) bytesPerWeight(cols, g int) float64 {
	switch m {
	case BF16, AMXBF16:
		return 2
	case AMXINT8:
		return 1 + 8/float64(cols)
	case AMXINT4:
		return 0.5 + 8/float64(cols)
	case INT4KGroup, RAWINT4:
		return 0.5 + 2/float64(g)
	case FP8:
		return 1 + 4.0/(128*128)
	}
	return 0
}

// intKernels reports whether m's weights are integer panels (int8 or int4)
// that the int8 kernels (VNNI dot products, AMX int8 tiles) multiply.
func (m Method) intKernels() bool {
	return m == AMXINT8 || m == AMXINT4 || m == INT4KGroup || m == RAWINT4
}

// InPlace reports whether m reads the checkpoint's weights without a copy.
func (m Method) InPlace() bool { return m == BF16 || m == FP8 }

// Proj names one of an expert's three projections.
type Proj int

// Projections of an expert, in HF order.
const (
	Gate Proj = iota
	Up
	Down
)

// String returns the HF name of the projection ("gate", "up", "down").
func (p Proj) String() string {
	switch p {
	case Gate:
		return "gate"
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return fmt.Sprintf("Proj(%d)", int(p))
}
