package cpu

import (
	"fmt"
	"unsafe"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// Block-scaled FP8 weights (see the contract in package backend): the
// F8_E4M3 bytes stay where Weight found them (the mmap), the block scales
// are widened once to float32, and MatMul decodes a few weight rows at a
// time into a worker's scratch (AVX-512 bit conversion, or a 256-entry
// table in Go) before the float32 kernel runs over them. Each decoded
// element is f32(e4m3) * scale rounded once, so results equal
// dequantise-then-f32-matmul up to summation order.

// fp8Weight holds an FP8 tensor's quantisation.
type fp8Weight struct {
	q      []uint8   // [O, K] E4M3 codes
	scale  []float32 // [sr, sc] block scales
	bn, bk int
	sc     int // scale columns = ceil(K/bk)
}

// fp8Table maps every E4M3 code to its float32 value (0x7f/0xff: NaN).
var fp8Table = func() (t [256]float32) {
	for i := range t {
		t[i] = tensor.F8E4M3ToF32(uint8(i))
	}
	return t
}()

// fp8Rows is how many weight rows MatMul decodes at a time (4 rows of
// K floats stay in L1/L2 while every token block uses them).
const fp8Rows = 4

// widen returns h's float data as float32 (a copy).
func widen(h *backend.Host) ([]float32, error) {
	n := len(h.Data) / h.DType.Size()
	out := make([]float32, n)
	for i := range out {
		switch h.DType {
		case tensor.F32:
			out[i] = *(*float32)(unsafe.Pointer(&h.Data[4*i]))
		case tensor.BF16:
			out[i] = tensor.BF16ToF32(uint16(h.Data[2*i]) | uint16(h.Data[2*i+1])<<8)
		case tensor.F16:
			out[i] = tensor.F16ToF32(uint16(h.Data[2*i]) | uint16(h.Data[2*i+1])<<8)
		default:
			return nil, fmt.Errorf("tensor %s: scale dtype %s", h.Name, h.DType)
		}
	}
	return out, nil
}

// fp8Tensor makes the CPU tensor of a checked block-scaled FP8 weight.
func fp8Tensor(h backend.Host) (*Tensor, error) {
	sc, err := widen(h.Scale)
	if err != nil {
		return nil, err
	}
	o, k := h.Shape[0], h.Shape[1]
	t := &Tensor{dt: tensor.F8E4M3, shape: []int{o, k}, n: o * k, name: h.Name}
	t.fp8 = &fp8Weight{q: h.Data, scale: sc, bn: h.Block[0], bk: h.Block[1], sc: (k + h.Block[1] - 1) / h.Block[1]}
	return t, nil
}

// colScales fills cs[j] = scale of row block rb at column j.
func (f *fp8Weight) colScales(rb int, cs []float32) {
	row := f.scale[rb*f.sc : (rb+1)*f.sc]
	for j := range cs {
		cs[j] = row[j/f.bk]
	}
}

// decode writes row r (width k) of the weight into dst, given the column
// scales cs of r's row block.
func (f *fp8Weight) decode(r, k int, cs, dst []float32, simd bool) {
	q := f.q[r*k : (r+1)*k]
	if simd {
		fp8DequantSIMD(q, cs, dst[:k])
		return
	}
	for j, c := range q {
		dst[j] = fp8Table[c] * cs[j]
	}
}

// at is element i of the dequantised weight.
func (f *fp8Weight) at(i, k int) float32 {
	r, c := i/k, i%k
	return fp8Table[f.q[i]] * f.scale[(r/f.bn)*f.sc+c/f.bk]
}

// mmFP8Block is mmBlock for an FP8 weight: out[i*ldo+c] = x[i] · w[c] for
// i < n, c0 <= c < c1.
func (b *Backend) mmFP8Block(worker int, out []float32, ldo int, x []float32, ldx, n int, w *Tensor, k, c0, c1 int) {
	f := w.fp8
	buf := b.scratch(worker, (fp8Rows+1)*k)
	cs, rows := buf[:k], buf[k:]
	curRB := -1
	for c := c0; c < c1; c += fp8Rows {
		r1 := min(c+fp8Rows, c1)
		for r := c; r < r1; r++ {
			if rb := r / f.bn; rb != curRB {
				f.colScales(rb, cs)
				curRB = rb
			}
			f.decode(r, k, cs, rows[(r-c)*k:], b.simd)
		}
		if b.simd {
			mmF32SIMD(x, ldx, n, rows, k, r1-c, out[c:], ldo)
			continue
		}
		for r := c; r < r1; r++ {
			wr := rows[(r-c)*k : (r-c+1)*k]
			for i := 0; i < n; i++ {
				var s float32
				for j, v := range x[i*ldx : i*ldx+k] {
					s += v * wr[j]
				}
				out[i*ldo+r] = s
			}
		}
	}
}
