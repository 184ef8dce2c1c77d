package cpuexperts

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ktserve/kt/tensor"
)

// LayerSpec names the method and shapes of a layer.
type LayerSpec struct {
	Method       Method
	Experts      int
	Hidden       int
	Intermediate int
	// GroupSize is the INT4_KGROUP group (64 or 128; 0 = 128), or RAWINT4's:
	// the checkpoint's (32, 64 or 128; 0 = 32).
	GroupSize int
}

// Matrix is one projection of one expert as a checkpoint stores it: gate and
// up are [Intermediate][Hidden], down is [Hidden][Intermediate], row-major.
type Matrix struct {
	DType      tensor.DType // BF16, F32, F8E4M3, or I32 for pack-quantized INT4
	Rows, Cols int
	Data       []byte
	// BlockScale is FP8's weight_scale_inv, [ceil(Rows/128)][ceil(Cols/128)].
	BlockScale []float32
	// Int4Group > 0 makes m a compressed-tensors pack-quantized INT4 matrix
	// (DType I32): each row is ceil(Cols/8) little-endian int32 words of
	// eight 4-bit codes, the lowest nibble first, a code being the signed
	// value + 8, and GroupScale holds the scale of every row and group of
	// Int4Group columns, [Rows][ceil(Cols/Int4Group)].
	Int4Group  int
	GroupScale []float32
}

// PackedInt4 reports whether m is a pack-quantized INT4 matrix.
func (m Matrix) PackedInt4() bool { return m.Int4Group > 0 }

// DequantInt4 stores the values of pack-quantized INT4 matrix m (each code
// times its group's scale) in f, Rows x Cols (ToF32's way for such a
// matrix, in Go alone).
func (m Matrix) DequantInt4(f []float32) {
	words, groups := (m.Cols+7)/8, (m.Cols+m.Int4Group-1)/m.Int4Group
	for r := range m.Rows {
		row := m.Data[4*r*words : 4*(r+1)*words]
		sc := m.GroupScale[r*groups : (r+1)*groups]
		for c := range m.Cols {
			word := binary.LittleEndian.Uint32(row[4*(c/8):])
			f[r*m.Cols+c] = float32(int((word>>(4*(c%8)))&0xF)-8) * sc[c/m.Int4Group]
		}
	}
}

// QuantizeInt4 is the rows x cols matrix w as compressed-tensors
// pack-quantizes it into INT4 (symmetric, as Kimi-K2-Thinking's experts):
// per row and group of group columns a scale amax/7.5 rounded to bf16, and
// each value's code round(w/scale) clamped to -8..7, stored + 8.
func QuantizeInt4(w []float32, rows, cols, group int) Matrix {
	words, groups := (cols+7)/8, (cols+group-1)/group
	m := Matrix{DType: tensor.I32, Rows: rows, Cols: cols, Data: make([]byte, 4*rows*words),
		Int4Group: group, GroupScale: make([]float32, rows*groups)}
	for r := range rows {
		row := w[r*cols : (r+1)*cols]
		for g := range groups {
			lo, hi := g*group, min((g+1)*group, cols)
			var amax float64
			for _, v := range row[lo:hi] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			s := tensor.BF16ToF32(tensor.F32ToBF16(float32(amax / 7.5)))
			m.GroupScale[r*groups+g] = s
			for c := lo; c < hi; c++ {
				q := 0
				if s > 0 {
					q = max(-8, min(7, int(math.RoundToEven(float64(row[c]/s)))))
				}
				at := 4 * (r*words + c/8)
				binary.LittleEndian.PutUint32(m.Data[at:], binary.LittleEndian.Uint32(m.Data[at:])|uint32(q+8)<<(4*(c%8)))
			}
		}
	}
	return m
}

// Check reports whether m is a rows x cols matrix whose data and scales
// have the lengths its dtype needs.
func (m Matrix) Check(rows, cols int) error {
	if m.Rows != rows || m.Cols != cols {
		return fmt.Errorf("shape [%d %d], want [%d %d]", m.Rows, m.Cols, rows, cols)
	}
	if m.PackedInt4() {
		words, groups := int64(cols+7)/8, (cols+m.Int4Group-1)/m.Int4Group
		if m.DType != tensor.I32 || int64(len(m.Data)) != 4*int64(rows)*words {
			return fmt.Errorf("packed INT4: %s with %d bytes, want I32 with %d (%d words of 8 codes per row)", m.DType, len(m.Data), 4*int64(rows)*words, words)
		}
		if len(m.GroupScale) != rows*groups {
			return fmt.Errorf("packed INT4: %d group scales, want %d (%d per row, groups of %d)", len(m.GroupScale), rows*groups, groups, m.Int4Group)
		}
		return nil
	}
	if want := int64(rows) * int64(cols) * int64(m.DType.Size()); int64(len(m.Data)) != want {
		return fmt.Errorf("%s: %d bytes of data, want %d", m.DType, len(m.Data), want)
	}
	if m.DType == tensor.F8E4M3 {
		br, bc := (rows+127)/128, (cols+127)/128
		if len(m.BlockScale) != br*bc {
			return fmt.Errorf("weight_scale_inv has %d values, want %d (%dx%d blocks of 128x128)", len(m.BlockScale), br*bc, br, bc)
		}
	}
	return nil
}

// Source yields the full matrices of a layer's experts (HF layout). Matrix
// may be called from several goroutines at once.
type Source interface {
	Matrix(expert int, p Proj) (Matrix, error)
}

// QuantMatrix is one pool's slice of a projection as kt quant writes it:
// row-major int8 (Bits 8) or int4 (Bits 4, two per byte, low nibble first,
// values -7..7), with one float32 scale per row (value = q * scale).
type QuantMatrix struct {
	Bits       int
	Rows, Cols int
	Data       []byte
	Scale      []float32
}

// QuantSource yields pre-quantized slices (kt quant's layout); Quant may be
// called from several goroutines at once.
type QuantSource interface {
	// Pools is the pool count the weights were converted for.
	Pools() int
	Quant(expert, pool int, p Proj) (QuantMatrix, error)
}
