package modelconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// mutate loads a fixture's config.json as a map, applies edit, and returns
// the re-encoded JSON.
func mutate(t *testing.T, fixture string, edit func(m, text map[string]any)) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, fixture, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	text := m
	if tc, ok := m["text_config"].(map[string]any); ok {
		text = tc
	}
	edit(m, text)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name    string
		fixture string
		edit    func(m, text map[string]any)
		want    []string // substrings, all required
	}{
		{"unknown architecture", "qwen3moe-a", func(m, _ map[string]any) { m["architectures"] = []string{"LlamaForCausalLM"} }, []string{`"LlamaForCausalLM" is not supported`, "Qwen3MoeForCausalLM"}},
		{"no architectures", "qwen3moe-a", func(m, _ map[string]any) { delete(m, "architectures") }, []string{"architectures: missing"}},
		{"architectures not list", "qwen3moe-a", func(m, _ map[string]any) { m["architectures"] = 5 }, []string{"architectures: is not a list of strings"}},
		{"missing hidden_size", "qwen3moe-a", func(m, _ map[string]any) { delete(m, "hidden_size") }, []string{"hidden_size: missing"}},
		{"all missing at once", "qwen3next-a", func(m, _ map[string]any) {
			delete(m, "hidden_size")
			delete(m, "num_experts")
			m["linear_num_key_heads"] = "two"
		}, []string{"hidden_size: missing", "num_experts: missing", `linear_num_key_heads: "two" is not an integer`}},
		{"nested path", "qwen35moe-a", func(_, text map[string]any) { delete(text, "num_attention_heads") }, []string{"text_config.num_attention_heads: missing"}},
		{"no text_config", "qwen35moe-a", func(m, _ map[string]any) { delete(m, "text_config") }, []string{"text_config: missing"}},
		{"kv heads not dividing", "qwen3moe-a", func(m, _ map[string]any) { m["num_key_value_heads"] = 3 }, []string{"num_key_value_heads: 3 does not divide num_attention_heads 4"}},
		{"top-k over experts", "qwen3moe-a", func(m, _ map[string]any) { m["num_experts_per_tok"] = 9 }, []string{"num_experts_per_tok: 9 is more than num_experts 8"}},
		{"negative", "qwen3moe-a", func(m, _ map[string]any) { m["num_hidden_layers"] = -1 }, []string{"num_hidden_layers: must be positive"}},
		{"layer_types length", "qwen3next-a", func(m, _ map[string]any) { m["layer_types"] = []string{"full_attention"} }, []string{"layer_types: has 1 entries for num_hidden_layers 4"}},
		{"layer_types value", "qwen3next-a", func(m, _ map[string]any) {
			m["layer_types"] = []string{"full_attention", "sliding_attention", "full_attention", "full_attention"}
		}, []string{`layer_types: entry 1 is "sliding_attention"`}},
		{"mlp_only out of range", "qwen3moe-c", func(m, _ map[string]any) { m["mlp_only_layers"] = []int{7} }, []string{"mlp_only_layers: layer 7 is out of range"}},
		{"dense without intermediate", "qwen3moe-c", func(m, _ map[string]any) { delete(m, "intermediate_size") }, []string{"intermediate_size: missing: layers [0 2]"}},
		{"mrope sum", "qwen35moe-a", func(_, text map[string]any) {
			text["rope_parameters"].(map[string]any)["mrope_section"] = []int{4, 4, 4}
		}, []string{"mrope_section: [4 4 4] sums to 12, but the rotary dimension 16 has 8"}},
		{"partial rotary", "qwen3next-a", func(m, _ map[string]any) { m["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 1.5 }, []string{"partial_rotary_factor: must be in (0, 1]"}},
		{"odd rotary dim", "qwen3next-a", func(m, _ map[string]any) { m["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 0.03125 }, []string{"rotary dimension 1"}},
		{"rope type", "qwen3moe-a", func(m, _ map[string]any) { m["rope_parameters"].(map[string]any)["rope_type"] = "longrope" }, []string{`"longrope" is not supported`}},
		{"linear heads", "qwen3next-a", func(m, _ map[string]any) { m["linear_num_value_heads"] = 3 }, []string{"linear_num_value_heads: 3 is not a multiple of linear_num_key_heads 2"}},
		{"sliding window", "qwen3moe-a", func(m, _ map[string]any) { m["use_sliding_window"] = true }, []string{"use_sliding_window: sliding-window attention is not supported"}},
		{"quant method", "qwen3moe-a", func(m, _ map[string]any) { m["quantization_config"] = map[string]any{"quant_method": "gptq"} }, []string{`quant_method: "gptq" is not supported`}},
		{"compressed-tensors format", "deepseekv3-a", func(m, _ map[string]any) {
			m["quantization_config"] = packedInt4Quant("naive-quantized", 4, "group", 32, nil)
		}, []string{`format: "naive-quantized" is not supported`}},
		{"compressed-tensors bits", "deepseekv3-a", func(m, _ map[string]any) {
			m["quantization_config"] = packedInt4Quant("pack-quantized", 8, "group", 32, nil)
		}, []string{`8-bit "int" weights are not supported`}},
		{"compressed-tensors strategy", "deepseekv3-a", func(m, _ map[string]any) {
			m["quantization_config"] = packedInt4Quant("pack-quantized", 4, "channel", 0, nil)
		}, []string{`"channel" with group_size 0 is not supported`}},
		{"compressed-tensors activations", "deepseekv3-a", func(m, _ map[string]any) {
			m["quantization_config"] = packedInt4Quant("pack-quantized", 4, "group", 32, map[string]any{"num_bits": 8})
		}, []string{"input_activations: activation quantization is not supported"}},
		{"float where int", "qwen3moe-a", func(m, _ map[string]any) { m["hidden_size"] = 64.5 }, []string{"hidden_size: 64.5 is not an integer"}},
		{"huge int", "qwen3moe-a", func(m, _ map[string]any) { m["vocab_size"] = 1e30 }, []string{"vocab_size: 1e+30 is out of range"}},
		{"no context", "qwen3moe-a", func(m, _ map[string]any) { m["max_position_embeddings"] = 0 }, []string{"max_position_embeddings: must be positive, is 0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(mutate(t, c.fixture, c.edit))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	for _, bad := range []string{"", "null", "[]", `"x"`, "{", `{"architectures":["Qwen3MoeForCausalLM"],"text_config":5}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

func TestDerivedFacts(t *testing.T) {
	// full_attention_interval without layer_types: every 4th layer is full.
	b := mutate(t, "qwen3next-a", func(m, _ map[string]any) {
		delete(m, "layer_types")
		m["num_hidden_layers"] = 8
		m["full_attention_interval"] = 4
		m["decoder_sparse_step"] = 1
		m["mlp_only_layers"] = []int{5}
	})
	c, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var full, dense []int
	for _, l := range c.Layers {
		if l.Attention == FullAttention {
			full = append(full, l.Index)
		}
		if !l.IsMoE {
			dense = append(dense, l.Index)
		}
	}
	if !slices.Equal(full, []int{3, 7}) || !slices.Equal(dense, []int{5}) {
		t.Errorf("full = %v, dense = %v", full, dense)
	}
	if c.NumLinearLayers() != 6 || c.NumMoELayers() != 7 {
		t.Errorf("linear %d, moe %d", c.NumLinearLayers(), c.NumMoELayers())
	}
	// Older configs: rope_theta, rope_scaling and a top-level partial factor.
	b = mutate(t, "qwen3next-a", func(m, _ map[string]any) {
		delete(m, "rope_parameters")
		m["rope_theta"] = 1e6
		m["partial_rotary_factor"] = 0.5
		m["rope_scaling"] = map[string]any{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
		m["eos_token_id"] = []int{5, 6}
		m["head_dim"] = 32
	})
	c, err = Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rope.Theta != 1e6 || c.Rope.RotaryDim != 16 || c.Rope.Type != "yarn" || c.Rope.Factor != 4 || c.Rope.OriginalMaxPositions != 32768 {
		t.Errorf("rope = %+v", c.Rope)
	}
	if !slices.Equal(c.EOSTokenIDs, []int{5, 6}) {
		t.Errorf("eos = %v", c.EOSTokenIDs)
	}
	// head_dim absent: hidden_size / num_attention_heads.
	c, err = Parse(mutate(t, "qwen3moe-a", func(m, _ map[string]any) { delete(m, "head_dim") }))
	if err != nil || c.HeadDim != 16 {
		t.Errorf("head_dim = %d, %v", c.HeadDim, err)
	}
}

func TestGeneration(t *testing.T) {
	g, err := ParseGeneration([]byte(`{"eos_token_id":[151645,151643],"temperature":0.7,"top_p":0.8,"top_k":20,"do_sample":true,"pad_token_id":151643}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.EOSTokenIDs, []int{151645, 151643}) || *g.Temperature != 0.7 || *g.TopP != 0.8 || *g.TopK != 20 || !*g.DoSample {
		t.Errorf("g = %+v", g)
	}
	c := &Config{EOSTokenIDs: []int{151645, 7}}
	if got := StopTokenIDs(c, g); !slices.Equal(got, []int{151645, 151643, 7}) {
		t.Errorf("stop ids = %v", got)
	}
	for _, bad := range []string{`{"top_p":2}`, `{"eos_token_id":"x"}`, `{"temperature":-1}`, `{"top_k":-3}`, `[]`, `{"eos_token_id":[-1]}`} {
		if _, err := ParseGeneration([]byte(bad)); err == nil {
			t.Errorf("ParseGeneration(%s): no error", bad)
		}
	}
	g, ok, err := LoadGeneration(t.TempDir())
	if err != nil || ok || g == nil {
		t.Errorf("missing file: %v %v %v", g, ok, err)
	}
}

// FuzzParse checks that no config.json input panics.
func FuzzParse(f *testing.F) {
	for _, d := range []string{"qwen3moe-a", "qwen3next-b", "qwen35moe-a"} {
		b, err := os.ReadFile(filepath.Join(fixtureDir, d, "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil && len(c.Layers) != c.NumLayers {
			t.Fatalf("%d layers for num_hidden_layers %d", len(c.Layers), c.NumLayers)
		}
	})
}

// packedInt4Quant is a compressed-tensors quantization_config as
// Kimi-K2-Thinking's, with the fields a test varies.
func packedInt4Quant(format string, bits int, strategy string, group int, activations any) map[string]any {
	return map[string]any{"quant_method": "compressed-tensors", "format": format,
		"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"}, "input_activations": activations,
			"weights": map[string]any{"num_bits": bits, "type": "int", "symmetric": true, "strategy": strategy, "group_size": group, "dynamic": false}}}}
}

// TestPackedInt4Config reads Kimi-K2-Thinking's kind of quantization_config:
// the group size, and a description that names it.
func TestPackedInt4Config(t *testing.T) {
	c, err := Parse(mutate(t, "deepseekv3-a", func(m, _ map[string]any) {
		m["quantization_config"] = packedInt4Quant("pack-quantized", 4, "group", 32, nil)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Quantization != "compressed-tensors" || c.Int4GroupSize != 32 {
		t.Errorf("quantization %q, group %d", c.Quantization, c.Int4GroupSize)
	}
	// the routed-expert shape any MoE tool reads (kt quant) carries it too
	s, err := ParseMoEShape(mutate(t, "deepseekv3-a", func(m, _ map[string]any) {
		m["quantization_config"] = packedInt4Quant("pack-quantized", 4, "group", 32, nil)
	}))
	if err != nil || s.Int4Group != 32 {
		t.Errorf("MoE shape %+v, %v", s, err)
	}
}
