package modelconfig

import (
	"fmt"
	"regexp"
	"strconv"
)

// DeepSeek-V3 configuration (DeepseekV3ForCausalLM: DeepSeek-V3, R1, V3.1,
// Kimi-K2). Absent fields take transformers' DeepseekV3Config defaults;
// fields transformers ignores but a published config states
// (scoring_func, topk_method, moe_layer_freq) are held to the one value
// transformers computes, so a config meaning something else is refused
// rather than run differently.

// parseMLA reads the attention widths and the head_dim transformers derives
// from them.
func (c *Config) parseMLA(t object) {
	m := &c.MLA
	// q_lora_rank: null means one q_proj; absent means transformers' 1536
	if _, present := t.m["q_lora_rank"]; present && !t.has("q_lora_rank") {
		m.QLoRARank = 0
	} else {
		m.QLoRARank = t.optInt("q_lora_rank", 1536)
		if m.QLoRARank <= 0 {
			t.fail("q_lora_rank", "must be positive or null, is %d", m.QLoRARank)
		}
	}
	m.KVLoRARank = t.optInt("kv_lora_rank", 512)
	m.QKNopeHeadDim = t.optInt("qk_nope_head_dim", 128)
	m.QKRopeHeadDim = t.optInt("qk_rope_head_dim", 64)
	m.VHeadDim = t.optInt("v_head_dim", 128)
	m.RopeInterleave = t.optBool("rope_interleave", true)
	for _, f := range []struct {
		name string
		v    int
	}{{"kv_lora_rank", m.KVLoRARank}, {"qk_nope_head_dim", m.QKNopeHeadDim}, {"qk_rope_head_dim", m.QKRopeHeadDim}, {"v_head_dim", m.VHeadDim}} {
		if f.v <= 0 {
			t.fail(f.name, "must be positive, is %d", f.v)
		}
	}
	if m.QKRopeHeadDim%2 != 0 {
		t.fail("qk_rope_head_dim", "must be even, is %d", m.QKRopeHeadDim)
	}
	// transformers sets head_dim = qk_rope_head_dim, the rotary width; a
	// config stating another would rotate a width the query does not have
	if t.has("head_dim") {
		if hd := t.intField("head_dim"); hd != m.QKRopeHeadDim {
			t.fail("head_dim", "%d differs from qk_rope_head_dim %d (DeepSeek-V3's rotary width)", hd, m.QKRopeHeadDim)
		}
	}
	c.HeadDim = m.QKNopeHeadDim + m.QKRopeHeadDim
}

// parseGroupRouting reads the router, the shared and dense layers and the
// multi-token-prediction layers.
func (c *Config) parseGroupRouting(t object) {
	r := &c.Routing
	r.Groups = t.optInt("n_group", 8)
	r.TopKGroups = t.optInt("topk_group", 4)
	r.ScalingFactor = t.optFloat("routed_scaling_factor", 2.5)
	c.SharedExperts = t.optInt("n_shared_experts", 1)
	c.FirstKDenseReplace = t.optInt("first_k_dense_replace", 3)
	c.MTPLayers = t.optInt("num_nextn_predict_layers", 0)
	if s := t.optString("scoring_func", "sigmoid"); s != "sigmoid" {
		t.fail("scoring_func", "%q is not supported (DeepseekV3ForCausalLM scores experts with sigmoid)", s)
	}
	if s := t.optString("topk_method", "noaux_tc"); s != "noaux_tc" {
		t.fail("topk_method", "%q is not supported (DeepseekV3ForCausalLM picks experts by noaux_tc: group-limited top-k over bias-corrected scores)", s)
	}
	if f := t.optInt("moe_layer_freq", 1); f != 1 {
		t.fail("moe_layer_freq", "%d is not supported (every layer from first_k_dense_replace on is MoE)", f)
	}
	if c.SharedExperts < 0 {
		t.fail("n_shared_experts", "must not be negative, is %d", c.SharedExperts)
	}
	if c.FirstKDenseReplace < 0 {
		t.fail("first_k_dense_replace", "must not be negative, is %d", c.FirstKDenseReplace)
	}
	if c.MTPLayers < 0 {
		t.fail("num_nextn_predict_layers", "must not be negative, is %d", c.MTPLayers)
	}
	if !(r.ScalingFactor > 0) {
		t.fail("routed_scaling_factor", "must be positive, is %g", r.ScalingFactor)
	}
}

// deriveDeepseek checks the fields that depend on each other.
func (c *Config) deriveDeepseek(t object) {
	r := &c.Routing
	if c.NumKVHeads != c.NumHeads {
		t.fail("num_key_value_heads", "%d differs from num_attention_heads %d (multi-head latent attention has a key and value per query head)", c.NumKVHeads, c.NumHeads)
	}
	if c.Rope.PartialRotaryFactor != 1 {
		t.fail("partial_rotary_factor", "must be 1 for DeepSeek-V3 (qk_rope_head_dim is the rotary width), is %g", c.Rope.PartialRotaryFactor)
	}
	switch {
	case r.Groups < 1:
		t.fail("n_group", "must be at least 1, is %d", r.Groups)
	case c.NumExperts%r.Groups != 0:
		t.fail("n_group", "%d does not divide n_routed_experts %d", r.Groups, c.NumExperts)
	case c.NumExperts/r.Groups < 2:
		t.fail("n_group", "%d groups of n_routed_experts %d leave fewer than 2 experts a group (a group scores by its best two)", r.Groups, c.NumExperts)
	case r.TopKGroups < 1 || r.TopKGroups > r.Groups:
		t.fail("topk_group", "must be in [1, n_group %d], is %d", r.Groups, r.TopKGroups)
	}
	switch c.Rope.Type {
	case "default":
	case "yarn":
		if !(c.Rope.Factor > 0) {
			t.fail("rope_parameters.factor", "must be positive for yarn, is %g", c.Rope.Factor)
		}
		if c.Rope.OriginalMaxPositions <= 0 {
			t.fail("rope_parameters.original_max_position_embeddings", "missing: yarn needs the pretrained context length")
		}
	default:
		t.fail("rope_parameters.rope_type", "%q is not supported for DeepSeek-V3 (default, yarn)", c.Rope.Type)
	}
}

// KVValuesPerToken is the number of values one token keeps in the KV
// cache over all layers: key and value heads of every full-attention
// layer, or, with multi-head latent attention, the normed latent and the
// rotary key (kv_lora_rank + qk_rope_head_dim) per layer. Both backends
// store them as float32 (KVBytesPerToken).
func (c *Config) KVValuesPerToken() int {
	if c.Family == DeepseekV3 {
		return c.NumLayers * (c.MLA.KVLoRARank + c.MLA.QKRopeHeadDim)
	}
	return (c.NumLayers - c.NumLinearLayers()) * 2 * c.NumKVHeads * c.HeadDim
}

// KVBytesPerToken is KVValuesPerToken in bytes (float32 pages).
func (c *Config) KVBytesPerToken() int64 { return 4 * int64(c.KVValuesPerToken()) }

// mtpLayer matches a decoder-layer tensor name and captures its index.
var mtpLayer = regexp.MustCompile(`^model\.layers\.(\d+)\.`)

// isMTP reports whether name belongs to a DeepSeek-V3 multi-token-prediction
// layer: a decoder layer past num_hidden_layers.
func (c *Config) isMTP(name string) bool {
	if c.Family != DeepseekV3 {
		return false
	}
	m := mtpLayer.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	l, err := strconv.Atoi(m[1])
	return err == nil && l >= c.NumLayers
}

// MTPTensors returns the names of the multi-token-prediction layers'
// tensors in names (DeepseekV3: decoder layers past num_hidden_layers).
func (c *Config) MTPTensors(names []string) []string {
	var out []string
	for _, n := range names {
		if c.isMTP(n) {
			out = append(out, n)
		}
	}
	return out
}

// mla checks one multi-head latent attention layer under p.
func (k *checker) mla(p string) {
	c, m := k.c, k.c.MLA
	H, heads := int64(c.HiddenSize), int64(c.NumHeads)
	qk := int64(m.QKNopeHeadDim + m.QKRopeHeadDim)
	if m.QLoRARank > 0 {
		k.linear(p+"q_a_proj", int64(m.QLoRARank), H, c.AttentionBias)
		k.expect(p+"q_a_layernorm.weight", int64(m.QLoRARank))
		k.linear(p+"q_b_proj", heads*qk, int64(m.QLoRARank), false)
	} else {
		k.linear(p+"q_proj", heads*qk, H, false)
	}
	k.linear(p+"kv_a_proj_with_mqa", int64(m.KVLoRARank+m.QKRopeHeadDim), H, c.AttentionBias)
	k.expect(p+"kv_a_layernorm.weight", int64(m.KVLoRARank))
	k.linear(p+"kv_b_proj", heads*int64(m.QKNopeHeadDim+m.VHeadDim), int64(m.KVLoRARank), false)
	k.linear(p+"o_proj", H, heads*int64(m.VHeadDim), c.AttentionBias)
}

// describeMLA is Describe's attention line for multi-head latent attention.
func describeMLA(c *Config) string {
	m := c.MLA
	q := "q_proj"
	if m.QLoRARank > 0 {
		q = fmt.Sprintf("q LoRA rank %d", m.QLoRARank)
	}
	rope := "rotate-half"
	if m.RopeInterleave {
		rope = "interleaved"
	}
	return fmt.Sprintf("multi-head latent, %d heads, %s; kv latent %d + rope key %d (%s); q/k head %d+%d, v head %d",
		c.NumHeads, q, m.KVLoRARank, m.QKRopeHeadDim, rope, m.QKNopeHeadDim, m.QKRopeHeadDim, m.VHeadDim)
}
