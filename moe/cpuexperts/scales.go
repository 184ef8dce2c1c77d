//go:build linux && amd64 && cgo

package cpuexperts

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// WidenFloats reads little-endian F32, BF16 or F16 values (an FP8
// weight's weight_scale_inv as checkpoints store it) as float32.
func WidenFloats(dt tensor.DType, data []byte) ([]float32, error) {
	sz := dt.Size()
	if (dt != tensor.F32 && dt != tensor.BF16 && dt != tensor.F16) || len(data)%sz != 0 {
		return nil, fmt.Errorf("%d bytes of %s: want F32, BF16 or F16 values", len(data), dt)
	}
	f := make([]float32, len(data)/sz)
	for i := range f {
		switch dt {
		case tensor.F32:
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		case tensor.BF16:
			f[i] = tensor.BF16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		default:
			f[i] = tensor.F16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	}
	return f, nil
}

// HostMatrix is a 2-D host weight as the CPU expert engine reads it: the
// bytes as they are, and for block-scaled FP8 its scales. The engine keeps
// FP8 in 128 x 128 blocks (DeepSeek's and Qwen's FP8 checkpoints); a weight
// in other blocks (a row slice of fused experts off the block boundaries
// carries one scale row per weight row) is dequantized to f32 here, which
// every converting method takes and the in-place FP8 method refuses.
func HostMatrix(h backend.Host) (Matrix, error) {
	m := Matrix{DType: h.DType, Rows: h.Shape[0], Cols: h.Shape[1], Data: h.Data}
	if !h.FP8() {
		return m, nil
	}
	if err := h.Check(); err != nil {
		return Matrix{}, err
	}
	sc, err := WidenFloats(h.Scale.DType, h.Scale.Data)
	if err != nil {
		return Matrix{}, fmt.Errorf("%s: %w", h.Scale.Name, err)
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
