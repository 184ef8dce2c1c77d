package cpuexperts

import (
	"encoding/binary"
	"fmt"
	"math"

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
