// Package tensor holds the few types every part of kt shares: element types,
// shapes and their byte sizes.
package tensor

import (
	"fmt"
	"math"
)

// DType is the element type of a tensor, named as safetensors names it.
type DType uint8

// Element types known to kt. The zero value is Invalid.
const (
	Invalid DType = iota
	BF16
	F16
	F32
	F64
	F8E4M3
	I8
	U8
	I16
	I32
	I64
	Bool
)

var dtypeNames = [...]string{
	Invalid: "INVALID",
	BF16:    "BF16",
	F16:     "F16",
	F32:     "F32",
	F64:     "F64",
	F8E4M3:  "F8_E4M3",
	I8:      "I8",
	U8:      "U8",
	I16:     "I16",
	I32:     "I32",
	I64:     "I64",
	Bool:    "BOOL",
}

var dtypeSizes = [...]int{
	BF16: 2, F16: 2, F32: 4, F64: 8, F8E4M3: 1, I8: 1, U8: 1, I16: 2, I32: 4, I64: 8, Bool: 1,
}

// String returns the safetensors name of d ("BF16", "F8_E4M3", ...).
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the size of one element in bytes, or 0 for Invalid.
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// ParseDType maps a safetensors dtype name to a DType.
func ParseDType(name string) (DType, error) {
	for i, n := range dtypeNames {
		if i != int(Invalid) && n == name {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q", name)
}

// NumElements returns the product of shape, or an error if a dimension is
// negative or the product overflows int64.
func NumElements(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v overflows", shape)
		}
		n *= d
	}
	return n, nil
}

// MarshalText renders d by its safetensors name, so DTypes read well in
// JSON (also as map keys).
func (d DType) MarshalText() ([]byte, error) {
	if d.Size() == 0 {
		return nil, fmt.Errorf("cannot marshal %s", d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText parses a safetensors dtype name.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
