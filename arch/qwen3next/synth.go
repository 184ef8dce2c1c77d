package qwen3next

import (
	"fmt"

	"github.com/ktserve/kt/arch/internal/synth"
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
	if err := synth.WriteConfig(dir, cfg); err != nil {
		return err
	}
	var ck synth.Checkpoint
	H, E, I := int64(s.Hidden), int64(s.Experts), int64(s.MoEInter)
	kd, vd, hv := int64(s.LinKHeads*s.LinKDim), int64(s.LinVHeads*s.LinVDim), int64(s.LinVHeads)
	const pre = "model.language_model."
	ck.Add(pre+"embed_tokens.weight", int64(s.Vocab), H)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", pre, l)
		ck.AddFilled(p+"input_layernorm.weight", synth.Zero, H)
		ck.AddFilled(p+"post_attention_layernorm.weight", synth.Zero, H)
		if (l+1)%4 == 0 {
			q, kv, hd := int64(s.Heads*s.HeadDim), int64(s.KVHeads*s.HeadDim), int64(s.HeadDim)
			ck.Add(p+"self_attn.q_proj.weight", 2*q, H)
			ck.Add(p+"self_attn.k_proj.weight", kv, H)
			ck.Add(p+"self_attn.v_proj.weight", kv, H)
			ck.Add(p+"self_attn.o_proj.weight", H, q)
			ck.AddFilled(p+"self_attn.q_norm.weight", synth.Zero, hd)
			ck.AddFilled(p+"self_attn.k_norm.weight", synth.Zero, hd)
		} else {
			a := p + "linear_attn."
			ck.Add(a+"in_proj_qkv.weight", 2*kd+vd, H)
			ck.Add(a+"in_proj_z.weight", vd, H)
			ck.Add(a+"in_proj_b.weight", hv, H)
			ck.Add(a+"in_proj_a.weight", hv, H)
			ck.Add(a+"conv1d.weight", 2*kd+vd, 1, 4)
			ck.AddFilled(a+"A_log", synth.ALog, hv)
			ck.AddFilled(a+"dt_bias", synth.One, hv)
			ck.AddFilled(a+"norm.weight", synth.One, int64(s.LinVDim))
			ck.Add(a+"out_proj.weight", H, vd)
		}
		ck.Add(p+"mlp.gate.weight", E, H)
		ck.Add(p+"mlp.shared_expert.gate_proj.weight", int64(s.SharedInter), H)
		ck.Add(p+"mlp.shared_expert.up_proj.weight", int64(s.SharedInter), H)
		ck.Add(p+"mlp.shared_expert.down_proj.weight", H, int64(s.SharedInter))
		ck.Add(p+"mlp.shared_expert_gate.weight", 1, H)
		ck.AddExperts(p+"mlp.experts.", E, I, H, s.Fused)
	}
	ck.AddFilled(pre+"norm.weight", synth.Zero, H)
	ck.Add("lm_head.weight", int64(s.Vocab), H)
	return ck.Write(dir, seed)
}
