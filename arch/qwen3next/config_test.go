package qwen3next

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/modelconfig"
)

func TestParseConfig(t *testing.T) {
	for _, fx := range fixtures {
		c, err := ReadConfig(fixtureDir(fx))
		if err != nil {
			t.Fatal(err)
		}
		if c.Rope.RotaryDim != c.HeadDim/4 || !c.NormTopKProb && c.Architecture != ArchNext {
			t.Errorf("%s: rotary %d of head %d, norm_topk %v", fx, c.Rope.RotaryDim, c.HeadDim, c.NormTopKProb)
		}
	}
	// Qwen3-Next without layer_types: every 4th layer is full attention.
	c, err := ParseConfig([]byte(`{"architectures":["Qwen3NextForCausalLM"],"vocab_size":10,"hidden_size":8,
		"num_hidden_layers":8,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,
		"linear_key_head_dim":4,"linear_value_head_dim":4,"linear_num_key_heads":1,"linear_num_value_heads":2,
		"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":4,"shared_expert_intermediate_size":4,
		"norm_topk_prob":false,"mlp_only_layers":[1],"intermediate_size":6}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "linear_attention,linear_attention,linear_attention,full_attention,linear_attention,linear_attention,linear_attention,full_attention"
	var kinds []string
	for _, L := range c.Layers {
		kinds = append(kinds, L.Attention.String())
	}
	if got := strings.Join(kinds, ","); got != want {
		t.Errorf("layer types %s", got)
	}
	if c.NormTopKProb || c.Layers[1].IsMoE || !c.Layers[0].IsMoE {
		t.Errorf("norm_topk_prob %v, moe(1) %v, moe(0) %v", c.NormTopKProb, c.Layers[1].IsMoE, c.Layers[0].IsMoE)
	}
}

func TestParseConfigErrors(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(fixtureDir("qwen3next-b"), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ old, new, msg string }{
		"arch":        {`"Qwen3NextForCausalLM"`, `"LlamaForCausalLM"`, "architectures"},
		"heads":       {`"linear_num_value_heads": 4`, `"linear_num_value_heads": 6`, "linear_num_value_heads"},
		"layer types": {`"full_attention"`, `"sliding_attention"`, "layer_types"},
		"rope":        {`"rope_type": "default"`, `"rope_type": "yarn"`, "rope type"},
		"act":         {`"hidden_act": "silu"`, `"hidden_act": "gelu"`, "hidden_act"},
		"topk":        {`"num_experts_per_tok": 2`, `"num_experts_per_tok": 9`, "num_experts_per_tok"},
		"negative":    {`"hidden_size": 64`, `"hidden_size": -64`, "hidden_size"},
		"not json":    {`{`, `[`, ""},
		"no gate":     {`"hidden_act": "silu"`, `"hidden_act": "silu", "attn_output_gate": false`, "attn_output_gate"},
	} {
		body := strings.Replace(string(base), c.old, c.new, 1)
		if body == string(base) {
			t.Fatalf("%s: %q not in the fixture config", name, c.old)
		}
		_, err := ParseConfig([]byte(body))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.msg)
		}
	}
}

// FuzzParseConfig checks that no config.json body panics the parser.
func FuzzParseConfig(f *testing.F) {
	for _, fx := range fixtures {
		data, err := os.ReadFile(filepath.Join(fixtureDir(fx), "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"architectures":["Qwen3_5MoeForConditionalGeneration"],"text_config":null}`))
	f.Add([]byte(`{"architectures":["Qwen3NextForCausalLM"],"full_attention_interval":0,"num_hidden_layers":3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if len(c.Layers) != c.NumLayers {
			t.Fatalf("%d layers described for num_hidden_layers %d", len(c.Layers), c.NumLayers)
		}
		for _, L := range c.Layers {
			if L.IsMoE && (c.TopK < 1 || c.TopK > c.NumExperts || c.SharedExpertIntermediateSize < 1) {
				t.Fatalf("accepted bad MoE config %+v", c)
			}
			if L.Attention == modelconfig.LinearAttention && (c.Linear.NumKeyHeads < 1 || c.Linear.NumValueHeads%c.Linear.NumKeyHeads != 0) {
				t.Fatalf("accepted bad linear-attention config %+v", c)
			}
		}
	})
}
