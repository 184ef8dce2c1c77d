package expertsource

import (
	"encoding/binary"
	"math"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// HostMatrix is a 2-D host weight as the CPU expert engine reads it: the
// bytes as they are, and for block-scaled FP8 its scales. The engine keeps
// FP8 in 128 x 128 blocks (DeepSeek's and Qwen's FP8 checkpoints); a weight
// in other blocks (a row slice of fused experts off the block boundaries
// carries one scale row per weight row) is dequantized to f32 here, which
// every converting method takes and the in-place FP8 method refuses.
// Pack-quantized INT4 keeps its codes (RAWINT4 runs them; the converting
// methods dequantize them, cpuexperts.Matrix.ToF32).
func HostMatrix(h backend.Host) (cpuexperts.Matrix, error) {
	if h.PackedInt4() {
		return packedInt4Matrix(h)
	}
	m := cpuexperts.Matrix{DType: h.DType, Rows: h.Shape[0], Cols: h.Shape[1], Data: h.Data}
	if !h.FP8() {
		return m, nil
	}
	if err := h.Check(); err != nil {
		return cpuexperts.Matrix{}, err
	}
	sc, err := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: h.Scale.Name, DType: h.Scale.DType}, Data: h.Scale.Data}.ToF32()
	if err != nil {
		return cpuexperts.Matrix{}, err
	}
	if h.Block == [2]int{128, 128} {
		m.BlockScale = sc
		return m, nil
	}
	bn, bk := h.Block[0], h.Block[1]
	nb := (m.Cols + bk - 1) / bk
	f := make([]byte, 4*m.Rows*m.Cols)
	for r := 0; r < m.Rows; r++ {
		for c := 0; c < m.Cols; c++ {
			i := r*m.Cols + c
			binary.LittleEndian.PutUint32(f[4*i:], math.Float32bits(tensor.F8E4M3ToF32(h.Data[i])*sc[(r/bn)*nb+c/bk]))
		}
	}
	m.DType, m.Data = tensor.F32, f
	return m, nil
}
