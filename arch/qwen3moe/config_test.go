package qwen3moe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfigErrors(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(fixtureDir("qwen3moe-a"), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"num_key_value_heads": 2`, `"num_key_value_heads": 3`, "multiple"},
		{`"hidden_size": 64`, `"hidden_size": 0`, "hidden_size"},
		{`"num_hidden_layers": 3`, `"num_hidden_layers": 100000`, "num_hidden_layers"},
		{`"rope_type": "default"`, `"rope_type": "yarn"`, "rope_type"},
		{`"num_experts_per_tok": 2`, `"num_experts_per_tok": 9`, "num_experts_per_tok"},
		{`"hidden_act": "silu"`, `"hidden_act": "gelu"`, "hidden_act"},
		{`"vocab_size": 1000`, `"vocab_size": "x"`, "vocab_size"},
	} {
		data := strings.Replace(string(base), c.from, c.to, 1)
		if data == string(base) {
			t.Fatalf("fixture config lacks %s", c.from)
		}
		if _, err := ParseConfig([]byte(data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s", c.to, err, c.want)
		}
	}
}

func TestIsMoE(t *testing.T) {
	c, err := ReadConfig(fixtureDir("qwen3moe-c"))
	if err != nil {
		t.Fatal(err)
	}
	// mlp_only_layers [0], decoder_sparse_step 2: layers 1 and 3 are sparse
	for l, want := range []bool{false, true, false, true} {
		if c.Layers[l].IsMoE != want {
			t.Errorf("layer %d: IsMoE %v", l, !want)
		}
	}
}

// FuzzParseConfig checks that no config.json body panics and that accepted
// configs keep the invariants the model relies on.
func FuzzParseConfig(f *testing.F) {
	for _, fx := range fixtures {
		if data, err := os.ReadFile(filepath.Join(fixtureDir(fx), "config.json")); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"hidden_size":8,"num_attention_heads":2,"num_hidden_layers":1,"vocab_size":4,"num_experts":0,"intermediate_size":4}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if c.NumHeads%c.NumKVHeads != 0 || c.Rope.RotaryDim%2 != 0 || c.Rope.RotaryDim > c.HeadDim || c.NumLayers > 4096 || len(c.Layers) != c.NumLayers {
			t.Fatalf("accepted bad config %+v", c)
		}
		for l := 0; l < c.NumLayers; l++ {
			if c.Layers[l].IsMoE && (c.TopK < 1 || c.TopK > c.NumExperts || c.MoEIntermediateSize < 1) {
				t.Fatalf("accepted bad MoE config %+v", c)
			}
		}
	})
}
