package safetensors

import (
	"fmt"
	"unsafe"

	"github.com/ktserve/kt/tensor"
)

// Tensor is a tensor's description plus its raw little-endian bytes. When
// it comes from a File or Checkpoint, Data aliases the read-only mapping:
// writing to it faults.
type Tensor struct {
	TensorInfo
	Data []byte
}

// view reinterprets t.Data as []T after checking the dtype. When Data is not
// aligned for T (a header whose length is not a multiple of 8 can cause
// this), the bytes are copied into a fresh aligned slice instead.
func view[T any](t Tensor, want ...tensor.DType) ([]T, error) {
	ok := false
	for _, w := range want {
		ok = ok || t.DType == w
	}
	if !ok {
		return nil, fmt.Errorf("tensor %q is %s, not %s", t.Name, t.DType, want[0])
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(t.Data)%size != 0 {
		return nil, fmt.Errorf("tensor %q: %d bytes is not a whole number of %d-byte elements", t.Name, len(t.Data), size)
	}
	n := len(t.Data) / size
	if n == 0 {
		return []T{}, nil
	}
	p := unsafe.Pointer(unsafe.SliceData(t.Data))
	if uintptr(p)%unsafe.Alignof(zero) == 0 {
		return unsafe.Slice((*T)(p), n), nil
	}
	out := make([]T, n)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(t.Data)), t.Data)
	return out, nil
}

// BF16 returns the elements of a BF16 tensor as raw bfloat16 bit patterns.
func (t Tensor) BF16() ([]uint16, error) { return view[uint16](t, tensor.BF16) }

// F16 returns the elements of an F16 tensor as raw IEEE half bit patterns.
func (t Tensor) F16() ([]uint16, error) { return view[uint16](t, tensor.F16) }

// F32 returns the elements of an F32 tensor.
func (t Tensor) F32() ([]float32, error) { return view[float32](t, tensor.F32) }

// F64 returns the elements of an F64 tensor.
func (t Tensor) F64() ([]float64, error) { return view[float64](t, tensor.F64) }

// F8E4M3 returns the elements of an F8_E4M3 tensor as raw bytes.
func (t Tensor) F8E4M3() ([]uint8, error) { return view[uint8](t, tensor.F8E4M3) }

// I8 returns the elements of an I8 tensor.
func (t Tensor) I8() ([]int8, error) { return view[int8](t, tensor.I8) }

// U8 returns the elements of a U8 tensor.
func (t Tensor) U8() ([]uint8, error) { return view[uint8](t, tensor.U8) }

// I16 returns the elements of an I16 tensor.
func (t Tensor) I16() ([]int16, error) { return view[int16](t, tensor.I16) }

// I32 returns the elements of an I32 tensor.
func (t Tensor) I32() ([]int32, error) { return view[int32](t, tensor.I32) }

// I64 returns the elements of an I64 tensor.
func (t Tensor) I64() ([]int64, error) { return view[int64](t, tensor.I64) }

// Bool returns the elements of a BOOL tensor as a fresh slice; a byte other
// than 0 or 1 is an error.
func (t Tensor) Bool() ([]bool, error) {
	b, err := view[uint8](t, tensor.Bool)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(b))
	for i, v := range b {
		if v > 1 {
			return nil, fmt.Errorf("tensor %q: element %d is %d, not a boolean", t.Name, i, v)
		}
		out[i] = v == 1
	}
	return out, nil
}

// ToF32 returns a fresh float32 copy of a floating-point tensor (BF16, F16,
// F32, F64 or F8_E4M3), widening or narrowing each element.
func (t Tensor) ToF32() ([]float32, error) {
	switch t.DType {
	case tensor.BF16, tensor.F16:
		h, err := view[uint16](t, t.DType)
		if err != nil {
			return nil, err
		}
		conv := tensor.BF16ToF32
		if t.DType == tensor.F16 {
			conv = tensor.F16ToF32
		}
		out := make([]float32, len(h))
		for i, v := range h {
			out[i] = conv(v)
		}
		return out, nil
	case tensor.F32:
		f, err := t.F32()
		if err != nil {
			return nil, err
		}
		return append([]float32(nil), f...), nil
	case tensor.F64:
		f, err := t.F64()
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(f))
		for i, v := range f {
			out[i] = float32(v)
		}
		return out, nil
	case tensor.F8E4M3:
		out := make([]float32, len(t.Data))
		for i, v := range t.Data {
			out[i] = tensor.F8E4M3ToF32(v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("tensor %q is %s, not a floating-point type", t.Name, t.DType)
}
