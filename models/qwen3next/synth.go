package qwen3next

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// SynthShape sizes a synthetic random-weight Qwen3.5 MoE checkpoint
// (Qwen3_5MoeForConditionalGeneration layout, text weights only).
type SynthShape struct {
	Layers, Hidden, Heads, KVHeads, HeadDim int
	LinKHeads, LinVHeads, LinKDim, LinVDim  int
	Experts, TopK, MoEInter, SharedInter    int
	Vocab                                   int
	Fused                                   bool // fused 3-D expert tensors instead of per-expert keys
}

// Qwen35_35B_A3B is the shape of Qwen/Qwen3.5-35B-A3B (40 layers, every
// fourth one full attention).
var Qwen35_35B_A3B = SynthShape{Layers: 40, Hidden: 2048, Heads: 16, KVHeads: 2, HeadDim: 256,
	LinKHeads: 16, LinVHeads: 32, LinKDim: 128, LinVDim: 128,
	Experts: 256, TopK: 8, MoEInter: 512, SharedInter: 512, Vocab: 151936}

// ActiveBytesPerToken is the weight bytes (bf16) one decoded token reads
// with top-k routing: every layer's projections, router, shared expert and
// k routed experts, plus the lm head.
func (s SynthShape) ActiveBytesPerToken() int64 {
	H := int64(s.Hidden)
	var n int64
	for l := 0; l < s.Layers; l++ {
		if (l+1)%4 == 0 {
			q, kv := int64(s.Heads*s.HeadDim), int64(s.KVHeads*s.HeadDim)
			n += H*2*q + 2*H*kv + q*H
		} else {
			kd, vd := int64(s.LinKHeads*s.LinKDim), int64(s.LinVHeads*s.LinVDim)
			n += H*(2*kd+vd) + H*vd + 2*H*int64(s.LinVHeads) + vd*H
		}
		n += int64(s.Experts)*H + H + 3*H*int64(s.SharedInter) + int64(s.TopK)*3*H*int64(s.MoEInter)
	}
	n += int64(s.Vocab) * H
	return 2 * n
}

// WriteSynthetic writes config.json and model.safetensors of a Qwen3.5 MoE
// model with random bf16 weights to dir: matrices with uniform magnitude in
// [2^-7, 2^-6) and random sign, zero-centred norms 0 (scale 1), gated norm
// 1, A_log = log(U[1,16)), dt_bias 1. It streams, so the checkpoint never
// sits in RAM.
func WriteSynthetic(dir string, s SynthShape, seed uint64) error {
	half := s.HeadDim / 8 // rotary dims / 2 with partial_rotary_factor 0.25
	a := (half*11 + 16) / 32
	mrope := []int{a, a, half - 2*a} // [11, 11, 10] for head_dim 256
	text := map[string]any{
		"model_type": "qwen3_5_moe_text", "vocab_size": s.Vocab, "hidden_size": s.Hidden,
		"num_hidden_layers": s.Layers, "num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads,
		"head_dim": s.HeadDim, "full_attention_interval": 4,
		"linear_num_key_heads": s.LinKHeads, "linear_num_value_heads": s.LinVHeads,
		"linear_key_head_dim": s.LinKDim, "linear_value_head_dim": s.LinVDim, "linear_conv_kernel_dim": 4,
		"num_experts": s.Experts, "num_experts_per_tok": s.TopK, "moe_intermediate_size": s.MoEInter,
		"shared_expert_intermediate_size": s.SharedInter, "rms_norm_eps": 1e-6, "hidden_act": "silu",
		"max_position_embeddings": 262144, "eos_token_id": 151645,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
			"mrope_interleaved": true, "mrope_section": mrope},
	}
	cfg := map[string]any{"architectures": []string{ArchQwen35}, "model_type": "qwen3_5_moe",
		"text_config": text, "tie_word_embeddings": false}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		return err
	}
	var specs []safetensors.Spec
	kind := map[string]string{} // fill kind for non-matrix tensors
	add := func(name string, shape ...int64) {
		specs = append(specs, safetensors.Spec{Name: name, DType: tensor.BF16, Shape: shape})
	}
	vec := func(name, k string, n int64) { add(name, n); kind[name] = k }
	H, E, I := int64(s.Hidden), int64(s.Experts), int64(s.MoEInter)
	kd, vd, hv := int64(s.LinKHeads*s.LinKDim), int64(s.LinVHeads*s.LinVDim), int64(s.LinVHeads)
	const pre = "model.language_model."
	add(pre+"embed_tokens.weight", int64(s.Vocab), H)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", pre, l)
		vec(p+"input_layernorm.weight", "zero", H)
		vec(p+"post_attention_layernorm.weight", "zero", H)
		if (l+1)%4 == 0 {
			q, kv, hd := int64(s.Heads*s.HeadDim), int64(s.KVHeads*s.HeadDim), int64(s.HeadDim)
			add(p+"self_attn.q_proj.weight", 2*q, H)
			add(p+"self_attn.k_proj.weight", kv, H)
			add(p+"self_attn.v_proj.weight", kv, H)
			add(p+"self_attn.o_proj.weight", H, q)
			vec(p+"self_attn.q_norm.weight", "zero", hd)
			vec(p+"self_attn.k_norm.weight", "zero", hd)
		} else {
			a := p + "linear_attn."
			add(a+"in_proj_qkv.weight", 2*kd+vd, H)
			add(a+"in_proj_z.weight", vd, H)
			add(a+"in_proj_b.weight", hv, H)
			add(a+"in_proj_a.weight", hv, H)
			add(a+"conv1d.weight", 2*kd+vd, 1, 4)
			vec(a+"A_log", "alog", hv)
			vec(a+"dt_bias", "one", hv)
			vec(a+"norm.weight", "one", int64(s.LinVDim))
			add(a+"out_proj.weight", H, vd)
		}
		add(p+"mlp.gate.weight", E, H)
		add(p+"mlp.shared_expert.gate_proj.weight", int64(s.SharedInter), H)
		add(p+"mlp.shared_expert.up_proj.weight", int64(s.SharedInter), H)
		add(p+"mlp.shared_expert.down_proj.weight", H, int64(s.SharedInter))
		add(p+"mlp.shared_expert_gate.weight", 1, H)
		if s.Fused {
			add(p+"mlp.experts.gate_up_proj", E, 2*I, H)
			add(p+"mlp.experts.down_proj", E, H, I)
			continue
		}
		for e := 0; e < s.Experts; e++ {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			add(q+"gate_proj.weight", I, H)
			add(q+"up_proj.weight", I, H)
			add(q+"down_proj.weight", H, I)
		}
	}
	vec(pre+"norm.weight", "zero", H)
	add("lm_head.weight", int64(s.Vocab), H)
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	// fill writes n bytes of the logical tensor name, seeded by its name so
	// both expert layouts hold the same values.
	fill := func(name string, n int64) error {
		h := fnv.New64a()
		h.Write([]byte(name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		for n > 0 {
			m := min(n, int64(len(buf)))
			chunk := buf[:m]
			switch k := kind[name]; k {
			case "":
				// sign, exponent 2^-7, 7 random mantissa bits, four at a time
				for i := 0; i < len(chunk); i += 8 {
					r := rng.Uint64()
					for j := 0; j < 4 && i+2*j < len(chunk); j++ {
						binary.LittleEndian.PutUint16(chunk[i+2*j:], uint16(r>>(16*j))&0x807f|120<<7)
					}
				}
			default:
				for i := 0; i < len(chunk); i += 2 {
					var v uint16
					switch k {
					case "one":
						v = 0x3f80
					case "alog":
						v = tensor.F32ToBF16(float32(math.Log(1 + 15*rng.Float64())))
					}
					binary.LittleEndian.PutUint16(chunk[i:], v)
				}
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			n -= m
		}
		return nil
	}
	for _, sp := range specs {
		n := int64(2)
		for _, d := range sp.Shape {
			n *= d
		}
		var err error
		switch {
		case strings.HasSuffix(sp.Name, "mlp.experts.gate_up_proj"):
			p := strings.TrimSuffix(sp.Name, "gate_up_proj")
			for e := 0; e < s.Experts && err == nil; e++ {
				if err = fill(fmt.Sprintf("%s%d.gate_proj.weight", p, e), 2*I*H); err == nil {
					err = fill(fmt.Sprintf("%s%d.up_proj.weight", p, e), 2*I*H)
				}
			}
		case strings.HasSuffix(sp.Name, "mlp.experts.down_proj"):
			p := strings.TrimSuffix(sp.Name, "down_proj")
			for e := 0; e < s.Experts && err == nil; e++ {
				err = fill(fmt.Sprintf("%s%d.down_proj.weight", p, e), 2*I*H)
			}
		default:
			err = fill(sp.Name, n)
		}
		if err != nil {
			w.Abort()
			return err
		}
	}
	return w.Close()
}
