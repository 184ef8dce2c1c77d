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
