package qwen3moe

import (
	"fmt"

	"github.com/ktserve/kt/arch/internal/synth"
)

// SynthShape sizes a synthetic random-weight Qwen3-MoE checkpoint.
type SynthShape struct {
	Layers, Hidden, Heads, KVHeads, HeadDim int
	Experts, TopK, MoEInter, Vocab          int
	Fused                                   bool // fused 3-D expert tensors instead of per-expert keys
	// Exp is the magnitude of the random weights: |w| in [2^(Exp-127),
	// 2^(Exp-126)); 0 means 120 (about 0.01).
	Exp int
}

// Qwen3_30B_A3B is the shape of Qwen/Qwen3-30B-A3B (48 layers).
var Qwen3_30B_A3B = SynthShape{Layers: 48, Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128,
	Experts: 128, TopK: 8, MoEInter: 768, Vocab: 151936}

// WriteSynthetic writes config.json and model.safetensors of a Qwen3-MoE
// model with random bf16 weights (magnitude set by s.Exp, random sign;
// norms 1) to dir. It streams, so the checkpoint never sits in RAM.
func WriteSynthetic(dir string, s SynthShape, seed uint64) error {
	cfg := map[string]any{
		"architectures": []string{Architecture}, "model_type": "qwen3_moe",
		"vocab_size": s.Vocab, "hidden_size": s.Hidden, "intermediate_size": 6144,
		"moe_intermediate_size": s.MoEInter, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"num_experts": s.Experts, "num_experts_per_tok": s.TopK, "norm_topk_prob": true,
		"decoder_sparse_step": 1, "mlp_only_layers": []int{}, "rms_norm_eps": 1e-6,
		"rope_theta": 1e6, "max_position_embeddings": 40960, "tie_word_embeddings": false,
		"hidden_act": "silu", "eos_token_id": 151645, "bos_token_id": 151643, "torch_dtype": "bfloat16",
	}
	if err := synth.WriteConfig(dir, cfg); err != nil {
		return err
	}
	ck := synth.Checkpoint{Exp: s.Exp}
	H, hd, E, I := int64(s.Hidden), int64(s.HeadDim), int64(s.Experts), int64(s.MoEInter)
	ck.Add("model.embed_tokens.weight", int64(s.Vocab), H)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		ck.AddFilled(p+"input_layernorm.weight", synth.One, H)
		ck.AddFilled(p+"post_attention_layernorm.weight", synth.One, H)
		ck.Add(p+"self_attn.q_proj.weight", int64(s.Heads)*hd, H)
		ck.Add(p+"self_attn.k_proj.weight", int64(s.KVHeads)*hd, H)
		ck.Add(p+"self_attn.v_proj.weight", int64(s.KVHeads)*hd, H)
		ck.Add(p+"self_attn.o_proj.weight", H, int64(s.Heads)*hd)
		ck.AddFilled(p+"self_attn.q_norm.weight", synth.One, hd)
		ck.AddFilled(p+"self_attn.k_norm.weight", synth.One, hd)
		ck.Add(p+"mlp.gate.weight", E, H)
		ck.AddExperts(p+"mlp.experts.", E, I, H, s.Fused)
	}
	ck.AddFilled("model.norm.weight", synth.One, H)
	ck.Add("lm_head.weight", int64(s.Vocab), H)
	return ck.Write(dir, seed)
}
