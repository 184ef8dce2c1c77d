package qwen3moe

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Config is the part of a qwen3_moe config.json the forward pass needs.
type Config struct {
	Architectures         []string `json:"architectures"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	MoEIntermediateSize   int      `json:"moe_intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim"`
	NumExperts            int      `json:"num_experts"`
	NumLocalExperts       int      `json:"num_local_experts"`
	NumExpertsPerTok      int      `json:"num_experts_per_tok"`
	NormTopKProb          bool     `json:"norm_topk_prob"`
	DecoderSparseStep     int      `json:"decoder_sparse_step"`
	MLPOnlyLayers         []int    `json:"mlp_only_layers"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeTheta             float64  `json:"rope_theta"`
	PartialRotaryFactor   float64  `json:"partial_rotary_factor"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	AttentionBias         bool     `json:"attention_bias"`
	HiddenAct             string   `json:"hidden_act"`
	EOSTokenID            any      `json:"eos_token_id"`
	RopeParameters        *struct {
		RopeTheta float64 `json:"rope_theta"`
		RopeType  string  `json:"rope_type"`
	} `json:"rope_parameters"`
	RopeScaling *struct {
		RopeType string `json:"rope_type"`
		Type     string `json:"type"`
	} `json:"rope_scaling"`
}

// ReadConfig reads and validates dir/config.json.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("qwen3moe: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses and validates a config.json body, filling defaults
// the way transformers does.
func ParseConfig(data []byte) (*Config, error) {
	c := &Config{DecoderSparseStep: 1, RMSNormEps: 1e-6, RopeTheta: 10000, PartialRotaryFactor: 1, HiddenAct: "silu"}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, err
	}
	if c.NumExperts == 0 {
		c.NumExperts = c.NumLocalExperts
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.RopeParameters != nil {
		if c.RopeParameters.RopeTheta > 0 {
			c.RopeTheta = c.RopeParameters.RopeTheta
		}
		if t := c.RopeParameters.RopeType; t != "" && t != "default" {
			return nil, fmt.Errorf("rope_parameters.rope_type %q is not supported (only default rotary)", t)
		}
	}
	if c.RopeScaling != nil {
		t := c.RopeScaling.RopeType
		if t == "" {
			t = c.RopeScaling.Type
		}
		if t != "" && t != "default" {
			return nil, fmt.Errorf("rope_scaling type %q is not supported (only default rotary)", t)
		}
	}
	pos := func(name string, v int) error {
		if v <= 0 || v > 1<<24 {
			return fmt.Errorf("field %s = %d, want a positive size", name, v)
		}
		return nil
	}
	// caps keep a hostile config from sizing giant allocations before the
	// weights are checked against it
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"num_hidden_layers", c.NumHiddenLayers, 1024}, {"num_attention_heads", c.NumAttentionHeads, 1024},
		{"head_dim", c.HeadDim, 4096}, {"num_experts", max(c.NumExperts, 0), 1 << 16}, {"mlp_only_layers", len(c.MLPOnlyLayers), 1024},
	} {
		if f.v > f.max {
			return nil, fmt.Errorf("field %s = %d exceeds the supported %d", f.name, f.v, f.max)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads}, {"num_key_value_heads", c.NumKeyValueHeads},
		{"head_dim", c.HeadDim}, {"decoder_sparse_step", c.DecoderSparseStep},
	} {
		if err := pos(f.name, f.v); err != nil {
			return nil, err
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return nil, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HiddenAct != "silu" {
		return nil, fmt.Errorf("hidden_act %q is not supported (silu only)", c.HiddenAct)
	}
	if c.AttentionBias {
		return nil, fmt.Errorf("attention_bias true is not supported for qwen3_moe")
	}
	if c.PartialRotaryFactor <= 0 || c.PartialRotaryFactor > 1 {
		return nil, fmt.Errorf("partial_rotary_factor %g outside (0,1]", c.PartialRotaryFactor)
	}
	if rd := c.RotaryDim(); rd < 2 || rd%2 != 0 {
		return nil, fmt.Errorf("rotary dimension %d (head_dim %d x partial_rotary_factor %g) must be even and positive", rd, c.HeadDim, c.PartialRotaryFactor)
	}
	if c.RopeTheta <= 0 {
		return nil, fmt.Errorf("rope_theta %g must be positive", c.RopeTheta)
	}
	moe := false
	for l := 0; l < c.NumHiddenLayers; l++ {
		moe = moe || c.IsMoE(l)
	}
	if moe {
		if err := pos("num_experts", c.NumExperts); err != nil {
			return nil, err
		}
		if err := pos("moe_intermediate_size", c.MoEIntermediateSize); err != nil {
			return nil, err
		}
		if c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
			return nil, fmt.Errorf("num_experts_per_tok %d outside [1,%d]", c.NumExpertsPerTok, c.NumExperts)
		}
	}
	for l := 0; l < c.NumHiddenLayers; l++ {
		if !c.IsMoE(l) {
			if err := pos("intermediate_size", c.IntermediateSize); err != nil {
				return nil, err
			}
			break
		}
	}
	if c.MaxPositionEmbeddings <= 0 {
		c.MaxPositionEmbeddings = 32768
	}
	return c, nil
}

// IsMoE reports whether layer l has a sparse MoE block (else a dense MLP),
// following transformers' Qwen3MoeDecoderLayer.
func (c *Config) IsMoE(l int) bool {
	for _, d := range c.MLPOnlyLayers {
		if d == l {
			return false
		}
	}
	return c.NumExperts > 0 && (l+1)%c.DecoderSparseStep == 0
}

// RotaryDim is the number of rotated dims per head.
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
