package expertsource

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// PackedInt4Host reads the compressed-tensors pack-quantized INT4 linear
// weight under base (base.weight_packed: I32 words of eight 4-bit codes
// along the input columns, the lowest nibble first, a code being the
// signed value + 8; base.weight_scale: one scale per row and group of
// input columns (group, quantization_config's group_size);
// base.weight_shape: [out, in]) as a backend.Host that aliases the
// checkpoint's bytes (backend.Host.PackedInt4).
func PackedInt4Host(ck TensorGetter, base string, group int) (backend.Host, error) {
	if group < 1 {
		return backend.Host{}, fmt.Errorf("packed INT4 weight %s: group size %d", base, group)
	}
	get := func(suffix string) (safetensors.Tensor, error) {
		t, err := ck.Tensor(base + suffix)
		if err != nil {
			return t, fmt.Errorf("packed INT4 weight %s: %w", base, err)
		}
		return t, nil
	}
	packed, err := get(".weight_packed")
	if err != nil {
		return backend.Host{}, err
	}
	scale, err := get(".weight_scale")
	if err != nil {
		return backend.Host{}, err
	}
	shapeT, err := get(".weight_shape")
	if err != nil {
		return backend.Host{}, err
	}
	out, in, err := packedShape(shapeT)
	if err != nil {
		return backend.Host{}, fmt.Errorf("%s.weight_shape: %w", base, err)
	}
	if len(scale.Shape) != 2 || scale.Shape[1] < 1 {
		return backend.Host{}, fmt.Errorf("%s.weight_scale: shape %v, want [out, groups]", base, scale.Shape)
	}
	switch scale.DType {
	case tensor.BF16, tensor.F16, tensor.F32:
	default:
		return backend.Host{}, fmt.Errorf("%s.weight_scale: dtype %s, want BF16, F16 or F32", base, scale.DType)
	}
	h := backend.Host{Name: base + ".weight_packed", DType: packed.DType, Shape: []int{out, in}, Data: packed.Data, Int4Group: group,
		Scale: &backend.Host{Name: base + ".weight_scale", DType: scale.DType, Shape: ints(scale.Shape), Data: scale.Data}}
	if err := h.Check(); err != nil {
		return backend.Host{}, err
	}
	return h, nil
}

// PackedInt4For returns weight name ("....weight") as PackedInt4Host
// reads it when the checkpoint stores it packed (name's .weight_packed is
// there and group > 0); ok is false when it does not.
func PackedInt4For(ck TensorGetter, name string, group int) (h backend.Host, ok bool, err error) {
	base, isWeight := strings.CutSuffix(name, ".weight")
	if !isWeight || group < 1 {
		return backend.Host{}, false, nil
	}
	if _, err := ck.Tensor(base + ".weight_packed"); err != nil {
		return backend.Host{}, false, nil
	}
	h, err = PackedInt4Host(ck, base, group)
	return h, true, err
}

// packedInt4Matrix is a pack-quantized INT4 host as the CPU expert engine
// takes it: its words as they are, its group scales widened to f32.
func packedInt4Matrix(h backend.Host) (cpuexperts.Matrix, error) {
	if err := h.Check(); err != nil {
		return cpuexperts.Matrix{}, err
	}
	scale, err := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: h.Scale.Name, DType: h.Scale.DType}, Data: h.Scale.Data}.ToF32()
	if err != nil {
		return cpuexperts.Matrix{}, err
	}
	return cpuexperts.Matrix{DType: tensor.I32, Rows: h.Shape[0], Cols: h.Shape[1], Data: h.Data,
		Int4Group: h.Int4Group, GroupScale: scale}, nil
}

// PackedInt4BF16 is pack-quantized INT4 matrix h as a bf16 matrix of the
// same shape, each code times its group's scale rounded to bf16 (2^-9
// relative at most): how a routed expert of such a checkpoint runs on a
// backend's MoE op.
func PackedInt4BF16(h backend.Host) (backend.Host, error) {
	m, err := packedInt4Matrix(h)
	if err != nil {
		return backend.Host{}, err
	}
	f := make([]float32, m.Rows*m.Cols)
	m.DequantInt4(f)
	out := make([]byte, 0, 2*len(f))
	for _, v := range f {
		out = binary.LittleEndian.AppendUint16(out, tensor.F32ToBF16(v))
	}
	return backend.Host{Name: h.Name, DType: tensor.BF16, Shape: []int{m.Rows, m.Cols}, Data: out}, nil
}

// packedShape reads a weight_shape tensor: two positive I32 or I64 sizes.
func packedShape(t safetensors.Tensor) (out, in int, err error) {
	var v []int64
	switch {
	case t.DType == tensor.I64 && len(t.Data) == 16:
		v = []int64{int64(binary.LittleEndian.Uint64(t.Data)), int64(binary.LittleEndian.Uint64(t.Data[8:]))}
	case t.DType == tensor.I32 && len(t.Data) == 8:
		v = []int64{int64(int32(binary.LittleEndian.Uint32(t.Data))), int64(int32(binary.LittleEndian.Uint32(t.Data[4:])))}
	default:
		return 0, 0, fmt.Errorf("%s %v, want two I32 or I64 sizes", t.DType, t.Shape)
	}
	const limit = 1 << 20
	if v[0] < 1 || v[1] < 1 || v[0] > limit || v[1] > limit {
		return 0, 0, fmt.Errorf("sizes %v, want [out, in] in [1, %d]", v, limit)
	}
	return int(v[0]), int(v[1]), nil
}
