package modelconfig

import (
	"strings"
	"testing"
)

// deepseekV3JSON is deepseek-ai/DeepSeek-V3's config.json as published
// (the fields transformers reads, plus the ones it ignores).
const deepseekV3JSON = `{
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
  "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128,
  "n_shared_experts": 1, "n_routed_experts": 256, "ep_size": 1, "routed_scaling_factor": 2.5,
  "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
  "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1,
  "first_k_dense_replace": 3, "norm_topk_prob": true, "scoring_func": "sigmoid", "hidden_act": "silu",
  "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "tie_word_embeddings": false,
  "rope_theta": 10000, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
    "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
}`

func TestParseDeepseekV3(t *testing.T) {
	c, err := Parse([]byte(deepseekV3JSON))
	if err != nil {
		t.Fatal(err)
	}
	m := c.MLA
	if c.Family != DeepseekV3 || m.QLoRARank != 1536 || m.KVLoRARank != 512 || m.QKNopeHeadDim != 128 || m.QKRopeHeadDim != 64 || m.VHeadDim != 128 || !m.RopeInterleave {
		t.Fatalf("attention %+v family %v", m, c.Family)
	}
	if c.HeadDim != 192 || c.Rope.RotaryDim != 64 || c.Rope.Type != "yarn" || c.Rope.Factor != 40 || c.Rope.OriginalMaxPositions != 4096 || c.Rope.MScaleAllDim != 1 || !c.Rope.Truncate {
		t.Fatalf("head %d rope %+v", c.HeadDim, c.Rope)
	}
	if c.NumExperts != 256 || c.TopK != 8 || c.Routing != (GroupRouting{Groups: 8, TopKGroups: 4, ScalingFactor: 2.5}) || c.SharedExperts != 1 || !c.NormTopKProb {
		t.Fatalf("routing %+v experts %d top %d shared %d", c.Routing, c.NumExperts, c.TopK, c.SharedExperts)
	}
	if c.NumMoELayers() != 58 || c.Layers[2].IsMoE || !c.Layers[3].IsMoE || c.MTPLayers != 1 {
		t.Fatalf("%d MoE layers, MTP %d", c.NumMoELayers(), c.MTPLayers)
	}
	if got := c.KVValuesPerToken(); got != 61*(512+64) {
		t.Fatalf("KV values per token %d", got)
	}
	if c.Quantization != "fp8" {
		t.Fatalf("quantization %q", c.Quantization)
	}
	if !c.isMTP("model.layers.61.eh_proj.weight") || c.isMTP("model.layers.60.mlp.gate.weight") {
		t.Fatal("MTP layer detection")
	}
}

// TestParseDeepseekV3Refusals checks configs whose meaning this family
// would not compute are refused, naming the field.
func TestParseDeepseekV3Refusals(t *testing.T) {
	for _, tc := range []struct{ old, new, field string }{
		{`"scoring_func": "sigmoid"`, `"scoring_func": "softmax"`, "scoring_func"},
		{`"topk_method": "noaux_tc"`, `"topk_method": "greedy"`, "topk_method"},
		{`"moe_layer_freq": 1`, `"moe_layer_freq": 2`, "moe_layer_freq"},
		{`"n_group": 8`, `"n_group": 3`, "n_group"},
		{`"topk_group": 4`, `"topk_group": 9`, "topk_group"},
		{`"num_key_value_heads": 128`, `"num_key_value_heads": 16`, "num_key_value_heads"},
		{`"qk_rope_head_dim": 64`, `"qk_rope_head_dim": 64, "head_dim": 128`, "head_dim"},
		{`"qk_rope_head_dim": 64`, `"qk_rope_head_dim": 63`, "qk_rope_head_dim"},
		{`"original_max_position_embeddings": 4096, `, ``, "original_max_position_embeddings"},
		{`"type": "yarn"`, `"type": "linear"`, "rope_type"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			js := strings.Replace(deepseekV3JSON, tc.old, tc.new, 1)
			if js == deepseekV3JSON {
				t.Fatalf("%q not in the config", tc.old)
			}
			_, err := Parse([]byte(js))
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// TestParseDeepseekV3QProj checks q_lora_rank null (one q_proj) and the
// defaults transformers takes for absent fields.
func TestParseDeepseekV3QProj(t *testing.T) {
	js := strings.Replace(deepseekV3JSON, `"q_lora_rank": 1536`, `"q_lora_rank": null`, 1)
	c, err := Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if c.MLA.QLoRARank != 0 {
		t.Fatalf("q_lora_rank null parsed as %d", c.MLA.QLoRARank)
	}
	js = strings.Replace(deepseekV3JSON, `"q_lora_rank": 1536, `, ``, 1)
	if c, err = Parse([]byte(js)); err != nil || c.MLA.QLoRARank != 1536 {
		t.Fatalf("absent q_lora_rank: %d, %v (transformers' default is 1536)", c.MLA.QLoRARank, err)
	}
}
