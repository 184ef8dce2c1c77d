//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/ktserve/kt/tensor"
)

// Reference computes the MoE layer in plain float32/float64 Go: for every
// token, Σ over its routed, unskipped experts of w · down(silu(gate·x) ⊙ up·x).
// It is the oracle the kernels are tested against. x is [tokens][hidden].
func Reference(src Source, spec LayerSpec, x []float32, tokens, topK int, ids []int32, wts []float32, skip []bool) ([]float32, error) {
	H, I := spec.Hidden, spec.Intermediate
	out := make([]float32, tokens*H)
	cache := map[int][3][]float32{}
	get := func(e int) ([3][]float32, error) {
		if m, ok := cache[e]; ok {
			return m, nil
		}
		var m [3][]float32
		for p := Gate; p <= Down; p++ {
			mat, err := src.Matrix(e, p)
			if err != nil {
				return m, err
			}
			var buf []float32
			m[p] = append([]float32(nil), widen(mat, &buf)...)
		}
		cache[e] = m
		return m, nil
	}
	h := make([]float64, I)
	for t := 0; t < tokens; t++ {
		xt := x[t*H : (t+1)*H]
		for j := 0; j < topK; j++ {
			e := int(ids[t*topK+j])
			if e < 0 || e >= spec.Experts || (skip != nil && skip[e]) {
				continue
			}
			m, err := get(e)
			if err != nil {
				return nil, fmt.Errorf("reference: expert %d: %w", e, err)
			}
			for i := 0; i < I; i++ {
				var g, u float64
				for k := 0; k < H; k++ {
					g += float64(m[Gate][i*H+k]) * float64(xt[k])
					u += float64(m[Up][i*H+k]) * float64(xt[k])
				}
				h[i] = g / (1 + math.Exp(-g)) * u
			}
			w := float64(wts[t*topK+j])
			for r := 0; r < H; r++ {
				var d float64
				row := m[Down][r*I : (r+1)*I]
				for i := 0; i < I; i++ {
					d += float64(row[i]) * h[i]
				}
				out[t*H+r] += float32(w * d)
			}
		}
	}
	return out, nil
}

// widen converts a matrix to float32 in Go (FP8 block scales applied).
func widen(m Matrix, buf *[]float32) []float32 {
	n := m.Rows * m.Cols
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	f := (*buf)[:n]
	if m.PackedInt4() {
		m.DequantInt4(f)
		return f
	}
	for i := range f {
		switch m.DType {
		case tensor.BF16:
			f[i] = tensor.BF16ToF32(uint16(m.Data[2*i]) | uint16(m.Data[2*i+1])<<8)
		case tensor.F32:
			f[i] = math.Float32frombits(uint32(m.Data[4*i]) | uint32(m.Data[4*i+1])<<8 | uint32(m.Data[4*i+2])<<16 | uint32(m.Data[4*i+3])<<24)
		case tensor.F8E4M3:
			r, c := i/m.Cols, i%m.Cols
			f[i] = tensor.F8E4M3ToF32(m.Data[i]) * m.BlockScale[(r/128)*((m.Cols+127)/128)+c/128]
		}
	}
	return f
}

// RandomSource is a synthetic layer for tests and benchmarks: weights drawn
// from N(0, Std²) (Std 0 = 1/sqrt(cols), the scale of a trained layer),
// stored as DType (BF16, F8E4M3 with 128x128 block scales, or I32:
// pack-quantized INT4 as compressed-tensors writes it, QuantizeInt4, in
// groups of Spec.GroupSize columns, 0 = 32).
// Matrices are generated once and kept.
type RandomSource struct {
	Spec  LayerSpec
	DType tensor.DType
	Seed  uint64
	Std   float64
	mu    sync.Mutex
	mats  map[[2]int]Matrix
}

// Matrix implements Source.
func (r *RandomSource) Matrix(e int, p Proj) (Matrix, error) {
	if e < 0 || e >= r.Spec.Experts {
		return Matrix{}, fmt.Errorf("expert %d out of range", e)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mats == nil {
		r.mats = map[[2]int]Matrix{}
	}
	key := [2]int{e, int(p)}
	if m, ok := r.mats[key]; ok {
		return m, nil
	}
	rows, cols := r.Spec.Intermediate, r.Spec.Hidden
	if p == Down {
		rows, cols = cols, rows
	}
	rng := rand.New(rand.NewPCG(r.Seed, uint64(e*3+int(p))))
	std := r.Std
	if std == 0 {
		std = 1 / math.Sqrt(float64(cols))
	}
	m := Matrix{DType: r.DType, Rows: rows, Cols: cols}
	switch r.DType {
	case tensor.BF16:
		m.Data = make([]byte, rows*cols*2)
		for i := 0; i < rows*cols; i++ {
			b := tensor.F32ToBF16(float32(rng.NormFloat64() * std))
			m.Data[2*i], m.Data[2*i+1] = byte(b), byte(b>>8)
		}
	case tensor.F8E4M3:
		br, bc := (rows+127)/128, (cols+127)/128
		m.BlockScale = make([]float32, br*bc)
		f := make([]float64, rows*cols)
		for i := range f {
			f[i] = rng.NormFloat64() * std
		}
		for b := range m.BlockScale {
			amax := 0.0
			r0, c0 := (b/bc)*128, (b%bc)*128
			for y := r0; y < min(r0+128, rows); y++ {
				for x := c0; x < min(c0+128, cols); x++ {
					amax = max(amax, math.Abs(f[y*cols+x]))
				}
			}
			m.BlockScale[b] = float32(amax / 448)
		}
		m.Data = make([]byte, rows*cols)
		for i := range f {
			s := float64(m.BlockScale[(i/cols/128)*bc+(i%cols)/128])
			m.Data[i] = f32ToE4M3(f[i] / s)
		}
	case tensor.I32:
		group := r.Spec.GroupSize
		if group == 0 {
			group = 32
		}
		f := make([]float32, rows*cols)
		for i := range f {
			f[i] = float32(rng.NormFloat64() * std)
		}
		m = QuantizeInt4(f, rows, cols, group)
	default:
		return Matrix{}, fmt.Errorf("random source: unsupported dtype %s", r.DType)
	}
	r.mats[key] = m
	return m, nil
}

// f32ToE4M3 rounds v to the nearest e4m3fn value (saturating at ±448).
func f32ToE4M3(v float64) byte {
	var sign byte
	if v < 0 {
		sign, v = 0x80, -v
	}
	if v >= 448 {
		return sign | 0x7e
	}
	if v < math.Ldexp(1, -6) { // subnormal: steps of 2^-9
		m := int(math.RoundToEven(v / math.Ldexp(1, -9)))
		return sign | byte(m) // m == 8 is the smallest normal, 0x08
	}
	fr, e := math.Frexp(v) // v = fr * 2^e, fr in [0.5, 1)
	e--                    // v = (2*fr) * 2^e
	mant := int(math.RoundToEven((2*fr - 1) * 8))
	if mant == 8 {
		mant, e = 0, e+1
	}
	b := (e+7)<<3 | mant
	if b > 0x7e {
		b = 0x7e
	}
	return sign | byte(b)
}

// RandomBatch draws activations N(0,1), distinct top-k ids per token
// (uniform over experts) and softmax-like positive weights summing to 1.
func RandomBatch(seed uint64, tokens, topK, hidden, experts int) (x []float32, ids []int32, wts []float32) {
	rng := rand.New(rand.NewPCG(seed, 12345))
	x = make([]float32, tokens*hidden)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	ids = make([]int32, tokens*topK)
	wts = make([]float32, tokens*topK)
	for t := 0; t < tokens; t++ {
		perm := rng.Perm(experts)
		var sum float32
		for j := 0; j < topK; j++ {
			ids[t*topK+j] = int32(perm[j%experts])
			wts[t*topK+j] = rng.Float32() + 0.05
			sum += wts[t*topK+j]
		}
		for j := 0; j < topK; j++ {
			wts[t*topK+j] /= sum
		}
	}
	return x, ids, wts
}
