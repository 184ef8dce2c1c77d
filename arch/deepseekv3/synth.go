package deepseekv3

import (
	"fmt"

	"github.com/ktserve/kt/arch/internal/synth"
)

// SynthShape sizes a synthetic random-weight DeepSeek-V3 checkpoint.
type SynthShape struct {
	Layers, DenseLayers, Hidden, Heads     int
	QLoRA, KVLoRA, Nope, Rope, V           int // QLoRA 0: one q_proj
	Experts, TopK, MoEInter, Shared, Dense int // Dense: the dense layers' intermediate size
	Groups, TopKGroups                     int
	Vocab                                  int
	Fused                                  bool // fused 3-D expert tensors instead of per-expert keys
	// MTP writes a multi-token-prediction layer past the last layer (its
	// projection and norms), as the published checkpoints hold one.
	MTP bool
	// Exp is the magnitude of the random weights: |w| in [2^(Exp-127),
	// 2^(Exp-126)); 0 means 120 (about 0.01).
	Exp int
}

// DeepSeekV3 is the shape of deepseek-ai/DeepSeek-V3 (61 layers, the first
// 3 dense).
var DeepSeekV3 = SynthShape{Layers: 61, DenseLayers: 3, Hidden: 7168, Heads: 128,
	QLoRA: 1536, KVLoRA: 512, Nope: 128, Rope: 64, V: 128,
	Experts: 256, TopK: 8, MoEInter: 2048, Shared: 1, Dense: 18432, Groups: 8, TopKGroups: 4, Vocab: 129280}

// KimiK2 is the shape of moonshotai/Kimi-K2-Instruct (61 layers, the first
// dense): 384 experts in one group, 64 heads.
var KimiK2 = SynthShape{Layers: 61, DenseLayers: 1, Hidden: 7168, Heads: 64,
	QLoRA: 1536, KVLoRA: 512, Nope: 128, Rope: 64, V: 128,
	Experts: 384, TopK: 8, MoEInter: 2048, Shared: 1, Dense: 18432, Groups: 1, TopKGroups: 1, Vocab: 163840}

// WriteSynthetic writes config.json and model.safetensors of a DeepSeek-V3
// model with random bf16 weights (magnitude set by s.Exp, random sign;
// norms 1) to dir: YaRN rope as published (factor 40 from 4096), sigmoid
// routing with a random correction bias. It streams, so the checkpoint
// never sits in RAM.
func WriteSynthetic(dir string, s SynthShape, seed uint64) error {
	var qLoRA any
	if s.QLoRA > 0 {
		qLoRA = s.QLoRA
	}
	cfg := map[string]any{
		"architectures": []string{Architecture}, "model_type": "deepseek_v3",
		"vocab_size": s.Vocab, "hidden_size": s.Hidden, "intermediate_size": s.Dense,
		"moe_intermediate_size": s.MoEInter, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.Heads,
		"q_lora_rank": qLoRA, "kv_lora_rank": s.KVLoRA, "qk_nope_head_dim": s.Nope, "qk_rope_head_dim": s.Rope,
		"v_head_dim": s.V, "n_routed_experts": s.Experts, "num_experts_per_tok": s.TopK,
		"n_shared_experts": s.Shared, "first_k_dense_replace": s.DenseLayers, "n_group": s.Groups,
		"topk_group": s.TopKGroups, "routed_scaling_factor": 2.5, "norm_topk_prob": true,
		"scoring_func": "sigmoid", "topk_method": "noaux_tc", "rms_norm_eps": 1e-6,
		"rope_theta": 10000, "max_position_embeddings": 163840, "tie_word_embeddings": false,
		"rope_scaling": map[string]any{"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
			"beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
		"hidden_act": "silu", "eos_token_id": 1, "bos_token_id": 0, "torch_dtype": "bfloat16",
	}
	if err := synth.WriteConfig(dir, cfg); err != nil {
		return err
	}
	ck := synth.Checkpoint{Exp: s.Exp}
	H, heads, E, I := int64(s.Hidden), int64(s.Heads), int64(s.Experts), int64(s.MoEInter)
	qk := int64(s.Nope + s.Rope)
	ck.Add("model.embed_tokens.weight", int64(s.Vocab), H)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		ck.AddFilled(p+"input_layernorm.weight", synth.One, H)
		ck.AddFilled(p+"post_attention_layernorm.weight", synth.One, H)
		if s.QLoRA > 0 {
			ck.Add(p+"self_attn.q_a_proj.weight", int64(s.QLoRA), H)
			ck.AddFilled(p+"self_attn.q_a_layernorm.weight", synth.One, int64(s.QLoRA))
			ck.Add(p+"self_attn.q_b_proj.weight", heads*qk, int64(s.QLoRA))
		} else {
			ck.Add(p+"self_attn.q_proj.weight", heads*qk, H)
		}
		ck.Add(p+"self_attn.kv_a_proj_with_mqa.weight", int64(s.KVLoRA+s.Rope), H)
		ck.AddFilled(p+"self_attn.kv_a_layernorm.weight", synth.One, int64(s.KVLoRA))
		ck.Add(p+"self_attn.kv_b_proj.weight", heads*int64(s.Nope+s.V), int64(s.KVLoRA))
		ck.Add(p+"self_attn.o_proj.weight", H, heads*int64(s.V))
		if l < s.DenseLayers {
			for _, n := range []string{"gate_proj", "up_proj"} {
				ck.Add(p+"mlp."+n+".weight", int64(s.Dense), H)
			}
			ck.Add(p+"mlp.down_proj.weight", H, int64(s.Dense))
			continue
		}
		ck.Add(p+"mlp.gate.weight", E, H)
		ck.Add(p+"mlp.gate.e_score_correction_bias", E)
		if s.Shared > 0 {
			si := int64(s.Shared) * I
			ck.Add(p+"mlp.shared_experts.gate_proj.weight", si, H)
			ck.Add(p+"mlp.shared_experts.up_proj.weight", si, H)
			ck.Add(p+"mlp.shared_experts.down_proj.weight", H, si)
		}
		ck.AddExperts(p+"mlp.experts.", E, I, H, s.Fused)
	}
	if s.MTP {
		p := fmt.Sprintf("model.layers.%d.", s.Layers)
		ck.Add(p+"eh_proj.weight", H, 2*H)
		for _, n := range []string{"enorm", "hnorm", "shared_head.norm"} {
			ck.AddFilled(p+n+".weight", synth.One, H)
		}
	}
	ck.AddFilled("model.norm.weight", synth.One, H)
	ck.Add("lm_head.weight", int64(s.Vocab), H)
	return ck.Write(dir, seed)
}
