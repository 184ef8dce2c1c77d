package qwen3next

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Architectures this package serves (HF "architectures" strings).
const (
	ArchNext       = "Qwen3NextForCausalLM"
	ArchQwen35     = "Qwen3_5MoeForConditionalGeneration"
	ArchQwen35Text = "Qwen3_5MoeForCausalLM"
)

// Layer kinds of layer_types.
const (
	LinearAttention = "linear_attention"
	FullAttention   = "full_attention"
)

// Config is the part of a qwen3_next or qwen3_5_moe config.json the forward
// pass needs. Qwen3.5 nests the text model under text_config; ParseConfig
// flattens it.
type Config struct {
	Architecture string `json:"-"`
	ModelType    string `json:"model_type"`

	VocabSize             int     `json:"vocab_size"`
	HiddenSize            int     `json:"hidden_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	NumKeyValueHeads      int     `json:"num_key_value_heads"`
	HeadDim               int     `json:"head_dim"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	HiddenAct             string  `json:"hidden_act"`
	AttentionBias         bool    `json:"attention_bias"`
	AttnOutputGate        *bool   `json:"attn_output_gate"`
	EOSTokenID            any     `json:"eos_token_id"`

	// rotary
	RopeTheta           float64         `json:"rope_theta"`
	PartialRotaryFactor float64         `json:"partial_rotary_factor"`
	RopeParameters      *ropeParameters `json:"rope_parameters"`
	RopeScaling         *ropeParameters `json:"rope_scaling"`

	// layer pattern
	LayerTypes            []string `json:"layer_types"`
	FullAttentionInterval int      `json:"full_attention_interval"`

	// Gated DeltaNet
	LinearConvKernelDim int `json:"linear_conv_kernel_dim"`
	LinearKeyHeadDim    int `json:"linear_key_head_dim"`
	LinearValueHeadDim  int `json:"linear_value_head_dim"`
	LinearNumKeyHeads   int `json:"linear_num_key_heads"`
	LinearNumValueHeads int `json:"linear_num_value_heads"`

	// MoE
	NumExperts                   int   `json:"num_experts"`
	NumExpertsPerTok             int   `json:"num_experts_per_tok"`
	MoEIntermediateSize          int   `json:"moe_intermediate_size"`
	SharedExpertIntermediateSize int   `json:"shared_expert_intermediate_size"`
	NormTopKProb                 *bool `json:"norm_topk_prob"`
	DecoderSparseStep            int   `json:"decoder_sparse_step"`
	MLPOnlyLayers                []int `json:"mlp_only_layers"`
}

type ropeParameters struct {
	RopeTheta           float64 `json:"rope_theta"`
	RopeType            string  `json:"rope_type"`
	Type                string  `json:"type"`
	PartialRotaryFactor float64 `json:"partial_rotary_factor"`
	MRopeSection        []int   `json:"mrope_section"`
	MRopeInterleaved    bool    `json:"mrope_interleaved"`
}

// ReadConfig reads and validates dir/config.json.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("qwen3next: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses and validates a config.json body (flat qwen3_next, or
// qwen3_5_moe with its text model under text_config), filling defaults the
// way transformers does.
func ParseConfig(data []byte) (*Config, error) {
	var top struct {
		Architectures     []string        `json:"architectures"`
		TextConfig        json.RawMessage `json:"text_config"`
		TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, err
	}
	c := &Config{RMSNormEps: 1e-6, RopeTheta: 10000, PartialRotaryFactor: 0.25, HiddenAct: "silu",
		DecoderSparseStep: 1, FullAttentionInterval: 4, LinearConvKernelDim: 4}
	body := data
	if len(top.TextConfig) > 0 && string(top.TextConfig) != "null" {
		body = top.TextConfig
	}
	if err := json.Unmarshal(body, c); err != nil {
		if len(body) != len(data) {
			return nil, fmt.Errorf("text_config: %w", err)
		}
		return nil, err
	}
	if top.TieWordEmbeddings != nil {
		c.TieWordEmbeddings = *top.TieWordEmbeddings
	}
	for _, a := range top.Architectures {
		if a == ArchNext || a == ArchQwen35 || a == ArchQwen35Text {
			c.Architecture = a
			break
		}
	}
	if c.Architecture == "" {
		return nil, fmt.Errorf("architectures %v names none of %s, %s, %s", top.Architectures, ArchNext, ArchQwen35, ArchQwen35Text)
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// finish fills derived fields and validates.
func (c *Config) finish() error {
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	for _, rp := range []*ropeParameters{c.RopeParameters, c.RopeScaling} {
		if rp == nil {
			continue
		}
		if rp.RopeTheta > 0 {
			c.RopeTheta = rp.RopeTheta
		}
		if rp.PartialRotaryFactor > 0 {
			c.PartialRotaryFactor = rp.PartialRotaryFactor
		}
		t := rp.RopeType
		if t == "" {
			t = rp.Type
		}
		if t != "" && t != "default" {
			return fmt.Errorf("rope type %q is not supported (only default rotary)", t)
		}
	}
	pos := func(name string, v int) error {
		if v <= 0 || v > 1<<24 {
			return fmt.Errorf("field %s = %d, want a positive size", name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads}, {"num_key_value_heads", c.NumKeyValueHeads},
		{"head_dim", c.HeadDim}, {"decoder_sparse_step", c.DecoderSparseStep},
		{"linear_conv_kernel_dim", c.LinearConvKernelDim},
	} {
		if err := pos(f.name, f.v); err != nil {
			return err
		}
	}
	if c.NumHiddenLayers > 1<<12 {
		return fmt.Errorf("num_hidden_layers %d is implausible", c.NumHiddenLayers)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act %q is not supported (silu only)", c.HiddenAct)
	}
	if c.AttentionBias {
		return fmt.Errorf("attention_bias true is not supported")
	}
	if c.AttnOutputGate != nil && !*c.AttnOutputGate {
		return fmt.Errorf("attn_output_gate false is not supported")
	}
	if c.PartialRotaryFactor <= 0 || c.PartialRotaryFactor > 1 {
		return fmt.Errorf("partial_rotary_factor %g outside (0,1]", c.PartialRotaryFactor)
	}
	if rd := c.RotaryDim(); rd < 2 || rd%2 != 0 {
		return fmt.Errorf("rotary dimension %d (head_dim %d × partial_rotary_factor %g) must be even and positive", rd, c.HeadDim, c.PartialRotaryFactor)
	}
	if c.RopeTheta <= 0 {
		return fmt.Errorf("rope_theta %g must be positive", c.RopeTheta)
	}
	if rp := c.RopeParameters; rp != nil && len(rp.MRopeSection) > 0 {
		// Text-only input gives the temporal, height and width position
		// components the same value, so M-RoPE (interleaved or not) reduces
		// to plain rotary; the sections must still cover the rotary dims.
		s := 0
		for _, v := range rp.MRopeSection {
			if v < 0 {
				return fmt.Errorf("rope_parameters.mrope_section %v has a negative entry", rp.MRopeSection)
			}
			s += v
		}
		if s != c.RotaryDim()/2 {
			return fmt.Errorf("rope_parameters.mrope_section %v sums to %d, want rotary dim / 2 = %d", rp.MRopeSection, s, c.RotaryDim()/2)
		}
	}
	// layer pattern
	if len(c.LayerTypes) == 0 {
		if c.FullAttentionInterval <= 0 {
			return fmt.Errorf("full_attention_interval %d must be positive", c.FullAttentionInterval)
		}
		c.LayerTypes = make([]string, c.NumHiddenLayers)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = LinearAttention
			if (i+1)%c.FullAttentionInterval == 0 {
				c.LayerTypes[i] = FullAttention
			}
		}
	}
	if len(c.LayerTypes) != c.NumHiddenLayers {
		return fmt.Errorf("layer_types has %d entries for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
	}
	linear := false
	for i, t := range c.LayerTypes {
		switch t {
		case LinearAttention:
			linear = true
		case FullAttention:
		default:
			return fmt.Errorf("layer_types[%d] = %q, want %q or %q", i, t, LinearAttention, FullAttention)
		}
	}
	if linear {
		for _, f := range []struct {
			name string
			v    int
		}{
			{"linear_key_head_dim", c.LinearKeyHeadDim}, {"linear_value_head_dim", c.LinearValueHeadDim},
			{"linear_num_key_heads", c.LinearNumKeyHeads}, {"linear_num_value_heads", c.LinearNumValueHeads},
		} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		if c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
			return fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", c.LinearNumValueHeads, c.LinearNumKeyHeads)
		}
	}
	// MoE
	if c.NormTopKProb == nil || c.Architecture != ArchNext {
		// Qwen3.5's router always renormalises the top-k weights;
		// Qwen3-Next's config defaults norm_topk_prob to true.
		t := true
		c.NormTopKProb = &t
	}
	moe, dense := false, false
	for l := 0; l < c.NumHiddenLayers; l++ {
		if c.IsMoE(l) {
			moe = true
		} else {
			dense = true
		}
	}
	if moe {
		for _, f := range []struct {
			name string
			v    int
		}{
			{"num_experts", c.NumExperts}, {"moe_intermediate_size", c.MoEIntermediateSize},
			{"shared_expert_intermediate_size", c.SharedExpertIntermediateSize},
		} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		if c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
			return fmt.Errorf("num_experts_per_tok %d outside [1,%d]", c.NumExpertsPerTok, c.NumExperts)
		}
	}
	if dense {
		if err := pos("intermediate_size", c.IntermediateSize); err != nil {
			return err
		}
	}
	if c.MaxPositionEmbeddings <= 0 {
		c.MaxPositionEmbeddings = 32768
	}
	return nil
}

// IsLinear reports whether layer l is a Gated DeltaNet layer.
func (c *Config) IsLinear(l int) bool { return c.LayerTypes[l] == LinearAttention }

// IsMoE reports whether layer l has the sparse MoE block (else a dense MLP),
// following transformers' Qwen3NextDecoderLayer (Qwen3.5 has MoE everywhere).
func (c *Config) IsMoE(l int) bool {
	if c.Architecture != ArchNext {
		return true
	}
	for _, d := range c.MLPOnlyLayers {
		if d == l {
			return false
		}
	}
	return c.NumExperts > 0 && (l+1)%c.DecoderSparseStep == 0
}

// RotaryDim is the number of rotated dims per attention head.
func (c *Config) RotaryDim() int { return int(float64(c.HeadDim) * c.PartialRotaryFactor) }

// EOS returns the eos token ids of config.json (int or list).
func (c *Config) EOS() []int32 { return eosIDs(c.EOSTokenID) }

func eosIDs(v any) []int32 {
	switch x := v.(type) {
	case float64:
		return []int32{int32(x)}
	case []any:
		var ids []int32
		for _, e := range x {
			if f, ok := e.(float64); ok {
				ids = append(ids, int32(f))
			}
		}
		return ids
	}
	return nil
}

// readGenerationEOS returns generation_config.json's eos ids, if any.
func readGenerationEOS(dir string) []int32 {
	data, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if err != nil {
		return nil
	}
	var g struct {
		EOS any `json:"eos_token_id"`
	}
	if json.Unmarshal(data, &g) != nil {
		return nil
	}
	return eosIDs(g.EOS)
}
