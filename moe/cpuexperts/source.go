package cpuexperts

import "github.com/ktserve/kt/tensor"

// LayerSpec names the method and shapes of a layer.
type LayerSpec struct {
	Method       Method
	Experts      int
	Hidden       int
	Intermediate int
	// GroupSize is the INT4_KGROUP group (64 or 128); 0 = 128.
	GroupSize int
}

// Matrix is one projection of one expert as a checkpoint stores it: gate and
// up are [Intermediate][Hidden], down is [Hidden][Intermediate], row-major.
type Matrix struct {
	DType      tensor.DType // BF16, F32 or F8E4M3
	Rows, Cols int
	Data       []byte
	// BlockScale is FP8's weight_scale_inv, [ceil(Rows/128)][ceil(Cols/128)].
	BlockScale []float32
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
