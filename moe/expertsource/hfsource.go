package expertsource

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// TensorGetter is the part of a safetensors checkpoint a source needs.
type TensorGetter interface {
	Tensor(name string) (safetensors.Tensor, error)
}

// CheckpointSource reads one layer's routed experts from a Hugging Face
// checkpoint: {Prefix}layers.{Layer}.mlp.experts.{e}.{gate,up,down}_proj.weight
// (or the Naming's other pattern), bf16, fp8 e4m3 with a
// .weight_scale_inv block-scale tensor beside it, or pack-quantized INT4
// (Int4Group). The bytes alias the checkpoint's mapping (BF16 and FP8 use
// them in place, RAWINT4 repacks packed INT4's codes).
type CheckpointSource struct {
	Ckpt   TensorGetter
	Prefix string // "model." or "model.language_model."
	Layer  int
	Naming ExpertNaming // the zero value is NamingProj
	// Int4Group is the group size of compressed-tensors pack-quantized
	// INT4 experts (.weight_packed, .weight_scale, .weight_shape), which
	// Matrix serves as codes and f32 group scales; 0 when the checkpoint
	// has none.
	Int4Group int
}

// Matrix implements Source.
func (s *CheckpointSource) Matrix(e int, p cpuexperts.Proj) (cpuexperts.Matrix, error) {
	name := s.Naming.Name(s.Prefix, s.Layer, e, p)
	h, err := s.host(name)
	if err != nil {
		return cpuexperts.Matrix{}, err
	}
	if s.Naming != NamingFused {
		if len(h.Shape) != 2 {
			return cpuexperts.Matrix{}, fmt.Errorf("%s: shape %v, want 2-D", name, h.Shape)
		}
		return HostMatrix(h)
	}
	// the fused stacks (NamingFused): gate_up_proj [E, 2I, H] holds each
	// expert's gate rows then its up rows, down_proj [E, H, I];
	// backend.ExpertRows slices an fp8 stack's scales with the rows
	if len(h.Shape) != 3 {
		return cpuexperts.Matrix{}, fmt.Errorf("%s: shape %v, want [experts, out, in]", name, h.Shape)
	}
	first, rows := 0, h.Shape[1]
	if p != cpuexperts.Down {
		if rows%2 != 0 {
			return cpuexperts.Matrix{}, fmt.Errorf("%s: %d rows per expert, want gate and up rows alike (an even count)", name, rows)
		}
		rows /= 2
		if p == cpuexperts.Up {
			first = rows
		}
	}
	part, err := backend.ExpertRows(h, fmt.Sprintf("%s[%d].%s", name, e, p), e, first, rows)
	if err != nil {
		return cpuexperts.Matrix{}, err
	}
	return HostMatrix(part)
}

// host is tensor name of the checkpoint as a backend.Host; an fp8 one
// carries its 128 x 128 block scales, name+"_scale_inv" (the per-expert
// .weight_scale_inv), or transformers 5's name+"_scales_inv" of a fused
// stack.
func (s *CheckpointSource) host(name string) (backend.Host, error) {
	t, err := s.Ckpt.Tensor(name)
	if err != nil {
		if h, ok, perr := PackedInt4For(s.Ckpt, name, s.Int4Group); ok {
			return h, perr
		}
		return backend.Host{}, err
	}
	h := backend.Host{Name: name, DType: t.DType, Shape: ints(t.Shape), Data: t.Data}
	if t.DType != tensor.F8E4M3 {
		return h, nil
	}
	st, err := s.Ckpt.Tensor(name + "_scale_inv")
	if err != nil {
		if st, err = s.Ckpt.Tensor(name + "_scales_inv"); err != nil {
			return backend.Host{}, fmt.Errorf("%s is fp8 but its block scales are missing: %w", name, err)
		}
	}
	h.Scale = &backend.Host{Name: st.Name, DType: st.DType, Shape: ints(st.Shape), Data: st.Data}
	h.Block = [2]int{128, 128}
	return h, nil
}

func ints(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}
