//go:build linux && amd64 && cgo

package cpuexperts

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ktserve/kt/tensor"
)

// SyntheticSource generates real-shaped random weights quickly and without
// keeping them: each call regenerates expert e's matrix from a hash of
// (Seed, e, p). Values are roughly N(0, 1/cols) (sum of four uniforms), as
// bf16, as e4m3 with 128x128 block scales, or (I32) as random pack-quantized
// INT4 codes with one scale for every group of Spec.GroupSize columns
// (0 = 32). Safe for concurrent use; meant for benchmarks, where generating 256 experts must take well under a second
// per core.
type SyntheticSource struct {
	Spec  LayerSpec
	DType tensor.DType
	Seed  uint64
}

// Matrix implements Source.
func (s *SyntheticSource) Matrix(e int, p Proj) (Matrix, error) {
	if e < 0 || e >= s.Spec.Experts {
		return Matrix{}, fmt.Errorf("expert %d out of range", e)
	}
	rows, cols := s.Spec.Intermediate, s.Spec.Hidden
	if p == Down {
		rows, cols = cols, rows
	}
	n := rows * cols
	st := s.Seed*0x9e3779b97f4a7c15 ^ uint64(e*3+int(p)+1)*0xbf58476d1ce4e5b9
	// sum of four uniforms in [0,1): mean 2, variance 1/3
	scale := float32(math.Sqrt(3) / math.Sqrt(float64(cols)))
	next := func() float32 {
		st ^= st << 13
		st ^= st >> 7
		st ^= st << 17
		v := st
		a := float32(v&0xffff) + float32(v>>16&0xffff) + float32(v>>32&0xffff) + float32(v>>48)
		return (a/65536 - 2) * scale
	}
	m := Matrix{DType: s.DType, Rows: rows, Cols: cols}
	switch s.DType {
	case tensor.BF16:
		m.Data = make([]byte, 2*n)
		for i := 0; i < n; i++ {
			b := tensor.F32ToBF16(next())
			m.Data[2*i], m.Data[2*i+1] = byte(b), byte(b>>8)
		}
	case tensor.F8E4M3:
		bc := (cols + 127) / 128
		m.BlockScale = make([]float32, ((rows+127)/128)*bc)
		// values are bounded by 2*scale: one scale for every block maps that to 448
		for i := range m.BlockScale {
			m.BlockScale[i] = 2 * scale / 448
		}
		inv := 1 / float64(2*scale/448)
		m.Data = make([]byte, n)
		for i := 0; i < n; i++ {
			m.Data[i] = f32ToE4M3(float64(next()) * inv)
		}
	case tensor.I32: // pack-quantized INT4: random codes, one scale for every group
		m.Int4Group = s.Spec.GroupSize
		if m.Int4Group == 0 {
			m.Int4Group = 32
		}
		words, groups := (cols+7)/8, (cols+m.Int4Group-1)/m.Int4Group
		m.Data = make([]byte, 4*rows*words)
		for i := 0; i < len(m.Data); i += 4 {
			st ^= st << 13
			st ^= st >> 7
			st ^= st << 17
			binary.LittleEndian.PutUint32(m.Data[i:], uint32(st>>32))
		}
		m.GroupScale = make([]float32, rows*groups)
		for i := range m.GroupScale {
			m.GroupScale[i] = 2 * scale / 8 // codes of -8..7 over the bf16 values' range
		}
	default:
		return Matrix{}, fmt.Errorf("synthetic source: unsupported dtype %s", s.DType)
	}
	return m, nil
}
