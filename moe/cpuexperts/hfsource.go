//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"strings"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// TensorGetter is the part of a safetensors checkpoint a source needs.
type TensorGetter interface {
	Tensor(name string) (safetensors.Tensor, error)
}

// CheckpointSource reads one layer's routed experts from a Hugging Face
// checkpoint: {Prefix}layers.{Layer}.mlp.experts.{e}.{gate,up,down}_proj.weight
// (or the Naming's other pattern), bf16, or fp8 e4m3 with a
// .weight_scale_inv block-scale tensor beside it. The bytes alias the
// checkpoint's mapping (BF16 and FP8 use them in place).
type CheckpointSource struct {
	Ckpt   TensorGetter
	Prefix string // "model." or "model.language_model."
	Layer  int
	Naming ExpertNaming // the zero value is NamingProj
}

// Matrix implements Source.
func (s *CheckpointSource) Matrix(e int, p Proj) (Matrix, error) {
	if s.Naming == NamingFused {
		return s.fusedMatrix(e, p)
	}
	name := s.Naming.Name(s.Prefix, s.Layer, e, p)
	t, err := s.Ckpt.Tensor(name)
	if err != nil {
		return Matrix{}, err
	}
	if len(t.Shape) != 2 {
		return Matrix{}, fmt.Errorf("%s: shape %v, want 2-D", name, t.Shape)
	}
	m := Matrix{DType: t.DType, Rows: int(t.Shape[0]), Cols: int(t.Shape[1]), Data: t.Data}
	if t.DType == tensor.F8E4M3 {
		sn := strings.TrimSuffix(name, ".weight") + ".weight_scale_inv"
		st, err := s.Ckpt.Tensor(sn)
		if err != nil {
			return Matrix{}, fmt.Errorf("%s is fp8 but its block scales are missing: %w", name, err)
		}
		br, bc := (m.Rows+127)/128, (m.Cols+127)/128
		if len(st.Shape) != 2 || st.Shape[0] != int64(br) || st.Shape[1] != int64(bc) {
			return Matrix{}, fmt.Errorf("%s: shape %v, want [%d %d] (128x128 blocks); per-channel fp8 scales are not supported", sn, st.Shape, br, bc)
		}
		f, err := WidenFloats(st.DType, st.Data)
		if err != nil {
			return Matrix{}, fmt.Errorf("%s: %w", sn, err)
		}
		m.BlockScale = f
	}
	return m, nil
}

// fusedMatrix is expert e's projection p out of the layer's fused stacks
// (NamingFused): gate_up_proj [E, 2I, H] holds each expert's gate rows then
// its up rows, down_proj [E, H, I]. FP8 stacks carry 128 x 128 block
// scales [E, ceil(O/128), ceil(K/128)] as name+"_scale_inv" (transformers
// 5: name+"_scales_inv"); backend.ExpertRows slices them with the rows.
func (s *CheckpointSource) fusedMatrix(e int, p Proj) (Matrix, error) {
	name := NamingFused.Name(s.Prefix, s.Layer, e, p)
	t, err := s.Ckpt.Tensor(name)
	if err != nil {
		return Matrix{}, err
	}
	if len(t.Shape) != 3 {
		return Matrix{}, fmt.Errorf("%s: shape %v, want [experts, out, in]", name, t.Shape)
	}
	h := backend.Host{Name: name, DType: t.DType, Shape: []int{int(t.Shape[0]), int(t.Shape[1]), int(t.Shape[2])}, Data: t.Data}
	if t.DType == tensor.F8E4M3 {
		st, err := s.Ckpt.Tensor(name + "_scale_inv")
		if err != nil {
			if st, err = s.Ckpt.Tensor(name + "_scales_inv"); err != nil {
				return Matrix{}, fmt.Errorf("%s is fp8 but its block scales are missing: %w", name, err)
			}
		}
		ss := make([]int, len(st.Shape))
		for i, d := range st.Shape {
			ss[i] = int(d)
		}
		h.Scale = &backend.Host{Name: name + "_scale_inv", DType: st.DType, Shape: ss, Data: st.Data}
		h.Block = [2]int{128, 128}
	}
	first, rows := 0, h.Shape[1]
	if p != Down {
		if rows%2 != 0 {
			return Matrix{}, fmt.Errorf("%s: %d rows per expert, want gate and up rows alike (an even count)", name, rows)
		}
		rows /= 2
		if p == Up {
			first = rows
		}
	}
	part, err := backend.ExpertRows(h, fmt.Sprintf("%s[%d].%s", name, e, p), e, first, rows)
	if err != nil {
		return Matrix{}, err
	}
	return HostMatrix(part)
}
