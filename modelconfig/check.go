package modelconfig

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// TensorSource lists a checkpoint's tensors; *safetensors.Checkpoint
// satisfies it.
type TensorSource interface {
	Names() []string
	Info(name string) (safetensors.TensorInfo, bool)
}

// Expert storage layouts found by Check.
const (
	LayoutPerExpert = "per-expert" // mlp.experts.{E}.{gate,up,down}_proj.weight
	LayoutFused     = "fused"      // mlp.experts.gate_up_proj [E,2I,H] + mlp.experts.down_proj [E,H,I]
	LayoutMixed     = "mixed"      // some layers one way, some the other
)

// Report is the outcome of checking a checkpoint against its config.
type Report struct {
	// Problems lists every missing tensor, wrong shape or wrong dtype,
	// each naming the tensor.
	Problems []string
	// Unexpected lists tensors the config does not imply and that are not
	// known extras (vision tower, MTP head or DeepSeek-V3's MTP layers).
	Unexpected []string
	// Extras counts the known extra tensors (vision tower, MTP head or
	// layers).
	Extras int
	// Prefix is where the text model's tensors were found.
	Prefix string
	// ExpertLayout is LayoutPerExpert, LayoutFused or LayoutMixed.
	ExpertLayout string

	NumTensors int
	TotalBytes int64 // all tensors, extras included
	// RoutedExpertBytes is the size of all routed-expert weights (and their
	// scales): what kt keeps in CPU memory.
	RoutedExpertBytes int64
	// ActiveExpertBytesPerToken is the routed-expert weight read per token:
	// TopK experts in every MoE layer.
	ActiveExpertBytesPerToken int64
	// Params counts the elements of the tensors the config implies.
	Params int64
	// DTypeBytes sums tensor bytes per dtype.
	DTypeBytes map[tensor.DType]int64
}

// OK reports whether no problems were found (unexpected extras allowed).
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Err returns nil if OK, else an error listing every problem.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	errs := make([]error, len(r.Problems))
	for i, p := range r.Problems {
		errs[i] = errors.New(p)
	}
	return fmt.Errorf("checkpoint does not match config.json (%d problems):\n%w", len(r.Problems), errors.Join(errs...))
}

// extraPrefixes are tensors a checkpoint may carry beyond the text model.
var extraPrefixes = []string{"model.visual.", "visual.", "mtp.", "model.mtp."}

type checker struct {
	c        *Config
	src      TensorSource
	r        *Report
	used     map[string]bool
	expert   bool // tensors being checked are routed-expert weights
	layerExp int64
}

// Check verifies that src holds every tensor c implies, with the right
// shape and a weight dtype, and sizes the routed experts. It reports all
// problems at once.
func Check(c *Config, src TensorSource) *Report {
	k := &checker{c: c, src: src, r: &Report{DTypeBytes: map[tensor.DType]int64{}}, used: map[string]bool{}}
	r := k.r
	names := src.Names()
	r.NumTensors = len(names)
	for _, n := range names {
		if ti, ok := src.Info(n); ok {
			r.TotalBytes += ti.Size
			r.DTypeBytes[ti.DType] += ti.Size
		}
	}
	r.Prefix = c.TextPrefix
	for _, p := range []string{c.TextPrefix, "model.", "model.language_model."} {
		if _, ok := src.Info(p + "embed_tokens.weight"); ok {
			r.Prefix = p
			break
		}
	}
	p := r.Prefix
	H, V := int64(c.HiddenSize), int64(c.VocabSize)
	k.expect(p+"embed_tokens.weight", V, H)
	k.expect(p+"norm.weight", H)
	if !c.TieWordEmbeddings {
		k.expect("lm_head.weight", V, H)
	} else {
		k.optional("lm_head.weight", V, H)
	}
	fused, perExpert := 0, 0
	for _, l := range c.Layers {
		lp := fmt.Sprintf("%slayers.%d.", p, l.Index)
		k.expect(lp+"input_layernorm.weight", H)
		k.expect(lp+"post_attention_layernorm.weight", H)
		if c.Family == DeepseekV3 {
			k.mla(lp + "self_attn.")
		} else if l.Attention == FullAttention {
			k.attention(lp + "self_attn.")
		} else {
			k.linearAttention(lp + "linear_attn.")
		}
		if !l.IsMoE {
			I := int64(c.IntermediateSize)
			k.mlp(lp+"mlp.", I)
			continue
		}
		k.expect(lp+"mlp.gate.weight", int64(c.NumExperts), H)
		if c.SharedExpertIntermediateSize > 0 {
			k.mlp(lp+"mlp.shared_expert.", int64(c.SharedExpertIntermediateSize))
			k.expect(lp+"mlp.shared_expert_gate.weight", 1, H)
		}
		if c.Family == DeepseekV3 {
			k.expect(lp+"mlp.gate.e_score_correction_bias", int64(c.NumExperts))
			if c.SharedExperts > 0 {
				k.mlp(lp+"mlp.shared_experts.", int64(c.SharedExperts*c.MoEIntermediateSize))
			}
		}
		E, I := int64(c.NumExperts), int64(c.MoEIntermediateSize)
		k.expert, k.layerExp = true, 0
		if _, ok := src.Info(lp + "mlp.experts.gate_up_proj"); ok {
			fused++
			k.expect(lp+"mlp.experts.gate_up_proj", E, 2*I, H)
			k.expect(lp+"mlp.experts.down_proj", E, H, I)
		} else {
			perExpert++
			for e := range c.NumExperts {
				k.mlp(fmt.Sprintf("%smlp.experts.%d.", lp, e), I)
			}
		}
		k.expert = false
		r.ActiveExpertBytesPerToken += k.layerExp / E * int64(c.TopK)
	}
	switch {
	case fused > 0 && perExpert > 0:
		r.ExpertLayout = LayoutMixed
	case fused > 0:
		r.ExpertLayout = LayoutFused
	case perExpert > 0:
		r.ExpertLayout = LayoutPerExpert
	}
	for _, n := range names {
		if k.used[n] {
			continue
		}
		if hasAnyPrefix(n, extraPrefixes) || strings.HasSuffix(n, "rotary_emb.inv_freq") || c.isMTP(n) {
			r.Extras++
			continue
		}
		r.Unexpected = append(r.Unexpected, n)
	}
	slices.Sort(r.Unexpected)
	return r
}

func hasAnyPrefix(s string, ps []string) bool {
	for _, p := range ps {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func (k *checker) attention(p string) {
	c := k.c
	H, hd := int64(c.HiddenSize), int64(c.HeadDim)
	q := int64(c.NumHeads) * hd
	kv := int64(c.NumKVHeads) * hd
	qOut := q
	if c.AttnOutputGate {
		qOut = 2 * q
	}
	k.linear(p+"q_proj", qOut, H, c.AttentionBias)
	k.linear(p+"k_proj", kv, H, c.AttentionBias)
	k.linear(p+"v_proj", kv, H, c.AttentionBias)
	k.linear(p+"o_proj", H, q, c.AttentionBias)
	k.expect(p+"q_norm.weight", hd)
	k.expect(p+"k_norm.weight", hd)
}

func (k *checker) linearAttention(p string) {
	c, d := k.c, k.c.Linear
	H := int64(c.HiddenSize)
	kd, vd, hv := int64(d.KeyDim), int64(d.ValueDim), int64(d.NumValueHeads)
	if c.Family == Qwen3Next {
		k.linear(p+"in_proj_qkvz", 2*kd+2*vd, H, false)
		k.linear(p+"in_proj_ba", 2*hv, H, false)
	} else {
		k.linear(p+"in_proj_qkv", 2*kd+vd, H, false)
		k.linear(p+"in_proj_z", vd, H, false)
		k.linear(p+"in_proj_b", hv, H, false)
		k.linear(p+"in_proj_a", hv, H, false)
	}
	k.expect(p+"conv1d.weight", int64(d.ConvDim), 1, int64(d.ConvKernel))
	k.expect(p+"A_log", hv)
	k.expect(p+"dt_bias", hv)
	k.expect(p+"norm.weight", int64(d.ValueHeadDim))
	k.linear(p+"out_proj", H, vd, false)
}

// mlp checks a SwiGLU MLP of width inter under p.
func (k *checker) mlp(p string, inter int64) {
	H := int64(k.c.HiddenSize)
	k.linear(p+"gate_proj", inter, H, false)
	k.linear(p+"up_proj", inter, H, false)
	k.linear(p+"down_proj", H, inter, false)
}

// linear checks a linear layer's weight [out, in], its bias when asked,
// and FP8 block scales when the weight is F8_E4M3.
func (k *checker) linear(p string, out, in int64, bias bool) {
	if k.c.Int4GroupSize > 0 && !k.has(p+".weight") && k.has(p+".weight_packed") {
		k.packedInt4(p, out, in)
		if bias {
			k.expect(p+".bias", out)
		}
		return
	}
	ti, ok := k.expect(p+".weight", out, in)
	if bias {
		k.expect(p+".bias", out)
	}
	if ok && ti.DType == tensor.F8E4M3 && len(k.c.WeightBlockSize) == 2 {
		b0, b1 := int64(k.c.WeightBlockSize[0]), int64(k.c.WeightBlockSize[1])
		k.expect(p+".weight_scale_inv", (out+b0-1)/b0, (in+b1-1)/b1)
	}
}

// has reports whether the checkpoint holds tensor name.
func (k *checker) has(name string) bool {
	_, ok := k.src.Info(name)
	return ok
}

// packedInt4 checks a compressed-tensors pack-quantized INT4 linear layer:
// weight_packed (I32, eight 4-bit values a word along the input columns),
// weight_scale (a float per group of Int4GroupSize input columns) and
// weight_shape ([out, in]). Only routed experts may be packed: they run on
// the CPU expert engine, which reads them group by group.
func (k *checker) packedInt4(p string, out, in int64) {
	if !k.expert {
		k.r.Problems = append(k.r.Problems, fmt.Sprintf("%s: packed INT4 outside the routed experts is not supported", p+".weight_packed"))
		return
	}
	g := int64(k.c.Int4GroupSize)
	for _, t := range []struct {
		name   string
		shape  []int64
		dtypes []tensor.DType
	}{
		{".weight_packed", []int64{out, (in + 7) / 8}, []tensor.DType{tensor.I32}},
		{".weight_scale", []int64{out, (in + g - 1) / g}, []tensor.DType{tensor.BF16, tensor.F16, tensor.F32}},
		{".weight_shape", []int64{2}, []tensor.DType{tensor.I32, tensor.I64}},
	} {
		name := p + t.name
		ti, ok := k.src.Info(name)
		switch {
		case !ok:
			k.r.Problems = append(k.r.Problems, fmt.Sprintf("%s: missing (want shape %v)", name, t.shape))
			continue
		case !slices.Equal(ti.Shape, t.shape):
			k.r.Problems = append(k.r.Problems, fmt.Sprintf("%s: shape %v, config implies %v", name, ti.Shape, t.shape))
		case !slices.Contains(t.dtypes, ti.DType):
			k.r.Problems = append(k.r.Problems, fmt.Sprintf("%s: dtype %s, want one of %v", name, ti.DType, t.dtypes))
		}
		k.used[name] = true
		k.r.RoutedExpertBytes += ti.Size
		k.layerExp += ti.Size
		if t.name == ".weight_packed" {
			k.r.Params += out * in
		}
	}
}

// optional accounts for a tensor that may be absent but, if present, must
// have the given shape.
func (k *checker) optional(name string, shape ...int64) {
	if _, ok := k.src.Info(name); ok {
		k.expect(name, shape...)
	}
}

// expect checks one tensor's presence, shape and dtype.
func (k *checker) expect(name string, shape ...int64) (safetensors.TensorInfo, bool) {
	ti, ok := k.src.Info(name)
	if !ok {
		k.r.Problems = append(k.r.Problems, fmt.Sprintf("%s: missing (want shape %v)", name, shape))
		return ti, false
	}
	k.used[name] = true
	if k.expert {
		k.r.RoutedExpertBytes += ti.Size
		k.layerExp += ti.Size
	}
	k.r.Params += ti.NumElements()
	good := true
	if !slices.Equal(ti.Shape, shape) {
		k.r.Problems = append(k.r.Problems, fmt.Sprintf("%s: shape %v, config implies %v", name, ti.Shape, shape))
		good = false
	}
	switch ti.DType {
	case tensor.BF16, tensor.F16, tensor.F32:
	case tensor.F8E4M3:
		if k.c.Quantization != "fp8" {
			k.r.Problems = append(k.r.Problems, fmt.Sprintf("%s: dtype F8_E4M3 but config.json has no fp8 quantization_config", name))
			good = false
		}
	default:
		k.r.Problems = append(k.r.Problems, fmt.Sprintf("%s: dtype %s is not a weight type (BF16, F16, F32, F8_E4M3)", name, ti.DType))
		good = false
	}
	return ti, good
}
