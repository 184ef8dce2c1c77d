package backend

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/ktserve/kt/tensor"
)

// e4m3Pos lists the non-negative finite E4M3 values in code order (codes
// 0x00..0x7e), which is also increasing order.
var e4m3Pos = func() (v [127]float32) {
	for i := range v {
		v[i] = tensor.F8E4M3ToF32(uint8(i))
	}
	return v
}()

// F32ToE4M3 rounds v to the nearest E4M3 code (ties to the even code),
// saturating at ±448; NaN gives 0x7f.
func F32ToE4M3(v float32) uint8 {
	if v != v {
		return 0x7f
	}
	var sign uint8
	if math.Signbit(float64(v)) {
		sign, v = 0x80, -v
	}
	i := sort.Search(len(e4m3Pos), func(i int) bool { return e4m3Pos[i] >= v })
	switch {
	case i == len(e4m3Pos):
		i = len(e4m3Pos) - 1
	case i > 0:
		lo, hi := v-e4m3Pos[i-1], e4m3Pos[i]-v
		if lo < hi || (lo == hi && (i-1)%2 == 0) {
			i--
		}
	}
	return sign | uint8(i)
}

// QuantizeFP8 quantises the row-major [o, k] float32 matrix w to a
// block-scaled FP8 weight as FP8 checkpoints are made: per [bn, bk] block,
// scale = max|w| / 448 (1 for an all-zero block) and q = e4m3(w / scale).
// It returns the Host (F32 scales) and the dequantised float32 weights
// f32(e4m3(q)) * scale, the values the contract says the weight has.
func QuantizeFP8(name string, w []float32, o, k int, block [2]int) (Host, []float32, error) {
	if len(w) != o*k || block[0] <= 0 || block[1] <= 0 {
		return Host{}, nil, fmt.Errorf("QuantizeFP8 %s: %d values for [%d,%d], block %v", name, len(w), o, k, block)
	}
	ss := FP8ScaleShape(o, k, block)
	scale := make([]float32, ss[0]*ss[1])
	for i := range scale {
		rb, cb := i/ss[1], i%ss[1]
		var amax float32
		for r := rb * block[0]; r < min(o, (rb+1)*block[0]); r++ {
			for c := cb * block[1]; c < min(k, (cb+1)*block[1]); c++ {
				amax = max(amax, float32(math.Abs(float64(w[r*k+c]))))
			}
		}
		scale[i] = 1
		if amax > 0 {
			scale[i] = amax / 448
		}
	}
	q := make([]byte, o*k)
	deq := make([]float32, o*k)
	for r := 0; r < o; r++ {
		for c := 0; c < k; c++ {
			s := scale[(r/block[0])*ss[1]+c/block[1]]
			q[r*k+c] = F32ToE4M3(w[r*k+c] / s)
			deq[r*k+c] = tensor.F8E4M3ToF32(q[r*k+c]) * s
		}
	}
	sd := make([]byte, 4*len(scale))
	for i, v := range scale {
		binary.LittleEndian.PutUint32(sd[4*i:], math.Float32bits(v))
	}
	h := Host{Name: name, DType: tensor.F8E4M3, Shape: []int{o, k}, Data: q, Block: block,
		Scale: &Host{Name: name + "_scale_inv", DType: tensor.F32, Shape: ss[:], Data: sd}}
	return h, deq, nil
}

// Row slices of weights. Models split checkpoint matrices by rows (Qwen3.5's
// q_proj into query and gate rows per head, Qwen3-Next's fused in_proj_qkvz,
// transformers 5's fused 3-D experts into per-expert gate, up and down). A
// block-scaled FP8 weight's slice must carry its scales: where every part
// starts on a row block (and is whole blocks, or runs to the last row) the
// slice keeps the block [bn, bk] and takes the scale rows of its blocks;
// anywhere else it gets one scale row per weight row, copied from the row's
// block (block [1, bk]): the same value for every element, any split point.

// fp8Aligned reports whether rows [first, first+count) of an O-row FP8
// weight in row blocks of bn are whole blocks (the last may end at O).
func fp8Aligned(first, count, o, bn int) bool {
	return first%bn == 0 && (count%bn == 0 || first+count == o)
}

// checkRowParts checks parts (first row, row count) against o rows.
func checkRowParts(name string, parts [][2]int, o int) (int, error) {
	rows := 0
	for _, p := range parts {
		if p[0] < 0 || p[1] <= 0 || p[0]+p[1] > o {
			return 0, fmt.Errorf("tensor %s: rows [%d,%d) outside its %d rows", name, p[0], p[0]+p[1], o)
		}
		rows += p[1]
	}
	return rows, nil
}

// GatherRows returns a copy of rows of the 2-D weight h: each part (first
// row, row count) in order, named name. A block-scaled FP8 weight's scales
// come along as the comment above says. h must pass Check.
func GatherRows(h Host, name string, parts [][2]int) (Host, error) {
	if err := h.Check(); err != nil {
		return Host{}, err
	}
	if len(h.Shape) != 2 {
		return Host{}, fmt.Errorf("tensor %s: gathering rows of a %d-D tensor", h.Name, len(h.Shape))
	}
	o, k := h.Shape[0], h.Shape[1]
	rows, err := checkRowParts(h.Name, parts, o)
	if err != nil {
		return Host{}, err
	}
	rb := k * h.DType.Size()
	data := make([]byte, 0, rows*rb)
	for _, p := range parts {
		data = append(data, h.Data[p[0]*rb:(p[0]+p[1])*rb]...)
	}
	out := Host{Name: name, DType: h.DType, Shape: []int{rows, k}, Data: data}
	if !h.FP8() {
		return out, nil
	}
	bn, bk := h.Block[0], h.Block[1]
	sc := (k + bk - 1) / bk
	srb := sc * h.Scale.DType.Size() // bytes per scale row
	aligned := true
	for i, p := range parts {
		// a part ending in a partial block may only be the last
		if !fp8Aligned(p[0], p[1], o, bn) || (p[1]%bn != 0 && i != len(parts)-1) {
			aligned = false
		}
	}
	var sd []byte
	blk := h.Block
	if aligned {
		for _, p := range parts {
			sd = append(sd, h.Scale.Data[(p[0]/bn)*srb:((p[0]+p[1]+bn-1)/bn)*srb]...)
		}
	} else {
		blk = [2]int{1, bk}
		sd = make([]byte, 0, rows*srb)
		for _, p := range parts {
			for r := p[0]; r < p[0]+p[1]; r++ {
				sd = append(sd, h.Scale.Data[(r/bn)*srb:(r/bn+1)*srb]...)
			}
		}
	}
	ss := FP8ScaleShape(rows, k, blk)
	out.Block = blk
	out.Scale = &Host{Name: name + "_scale_inv", DType: h.Scale.DType, Shape: ss[:], Data: sd}
	return out, out.Check()
}

// ExpertRows returns rows [first, first+count) of expert e of h, a fused
// [E, O, K] expert tensor (or, with e = 0, a 2-D [O, K] matrix), named
// name: a view of h's data, with a copy of the scales only where an FP8
// split is not block-aligned. A 3-D FP8 tensor's Scale is
// [E, ceil(O/bn), ceil(K/bk)] (or as many elements in any shape).
func ExpertRows(h Host, name string, e, first, count int) (Host, error) {
	var ne, o, k int
	switch len(h.Shape) {
	case 2:
		ne, o, k = 1, h.Shape[0], h.Shape[1]
	case 3:
		ne, o, k = h.Shape[0], h.Shape[1], h.Shape[2]
	default:
		return Host{}, fmt.Errorf("tensor %s: shape %v, want [E, out, in] or [out, in]", h.Name, h.Shape)
	}
	if e < 0 || e >= ne {
		return Host{}, fmt.Errorf("tensor %s: expert %d of %d", h.Name, e, ne)
	}
	if _, err := checkRowParts(h.Name, [][2]int{{first, count}}, o); err != nil {
		return Host{}, err
	}
	if err := h.checkSize(); err != nil {
		return Host{}, err
	}
	sz := h.DType.Size()
	off := (e*o + first) * k * sz
	out := Host{Name: name, DType: h.DType, Shape: []int{count, k}, Data: h.Data[off : off+count*k*sz]}
	if !h.FP8() && h.DType != tensor.F8E4M3 {
		return out, nil
	}
	// expert e's [O, K] matrix with its scales, then its rows
	full := Host{Name: h.Name, DType: h.DType, Shape: []int{o, k}, Data: h.Data[e*o*k*sz : (e+1)*o*k*sz], Block: h.Block}
	if h.Scale != nil {
		ss := FP8ScaleShape(o, k, h.Block)
		n := 1
		for _, d := range h.Scale.Shape {
			n *= d
		}
		if h.Block[0] <= 0 || h.Block[1] <= 0 || n != ne*ss[0]*ss[1] {
			return Host{}, fmt.Errorf("tensor %s: scale %s has shape %v, want %d x %v for weight %v in blocks %v", h.Name, h.Scale.Name, h.Scale.Shape, ne, ss, h.Shape, h.Block)
		}
		if err := h.Scale.checkSize(); err != nil {
			return Host{}, err
		}
		per := ss[0] * ss[1] * h.Scale.DType.Size()
		full.Scale = &Host{Name: h.Scale.Name, DType: h.Scale.DType, Shape: ss[:], Data: h.Scale.Data[e*per : (e+1)*per]}
	}
	if err := full.Check(); err != nil {
		return Host{}, err
	}
	if !fp8Aligned(first, count, o, h.Block[0]) {
		return GatherRows(full, name, [][2]int{{first, count}})
	}
	bn := h.Block[0]
	srb := (k + h.Block[1] - 1) / h.Block[1] * h.Scale.DType.Size() // bytes per scale row
	sd := full.Scale.Data[(first/bn)*srb : ((first+count+bn-1)/bn)*srb]
	ss := FP8ScaleShape(count, k, h.Block)
	out.Block = h.Block
	out.Scale = &Host{Name: name + "_scale_inv", DType: h.Scale.DType, Shape: ss[:], Data: sd}
	return out, out.Check()
}
