package ktconvert

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeBase(t *testing.T, config string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "base")
	os.MkdirAll(dir, 0o755)
	if config != "" {
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644)
	}
	return dir
}

// qwen35Config returns a complete Qwen3.5 MoE config.json (the tiny
// transformers fixture testdata/models/qwen35moe-a, fields nested under
// text_config) with the given sizes; extra is raw JSON members added to
// text_config.
func qwen35Config(layers, experts, hidden, inter int, extra string) string {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "models", "qwen35moe-a", "config.json"))
	if err != nil {
		panic(err) // committed fixture
	}
	var top map[string]any
	if err := json.Unmarshal(data, &top); err != nil {
		panic(err)
	}
	tc := top["text_config"].(map[string]any)
	types := make([]string, layers)
	for i := range types {
		types[i] = "linear_attention"
		if (i+1)%4 == 0 {
			types[i] = "full_attention"
		}
	}
	tc["num_hidden_layers"], tc["num_experts"], tc["hidden_size"], tc["moe_intermediate_size"] = layers, experts, hidden, inter
	tc["layer_types"] = types
	tc["num_experts_per_tok"] = min(2, experts)
	if extra != "" {
		var more map[string]any
		if err := json.Unmarshal([]byte("{"+strings.TrimPrefix(extra, ",")+"}"), &more); err != nil {
			panic(err)
		}
		for k, v := range more {
			tc[k] = v
		}
	}
	out, _ := json.Marshal(top)
	return string(out)
}

func TestBaseModelCheck(t *testing.T) {
	in := synth(t, smallSpec()) // 5 layers, hidden 64, 8 experts, intermediate 32
	tests := []struct {
		name   string
		config string
		want   []string // mismatches listed; empty = must pass
	}{
		{"qwen35_matches", qwen35Config(5, 8, 64, 32, ""), nil},
		{"flat_qwen3moe_matches", `{"model_type": "qwen3_moe", "num_hidden_layers": 5, "num_experts": 8, "hidden_size": 64, "moe_intermediate_size": 32, "mlp_only_layers": [], "decoder_sparse_step": 1}`, nil},
		{"everything_wrong", qwen35Config(3, 16, 128, 64, ""), []string{
			"(5 mismatches)",
			"expert count: adapter has 8 experts per layer (layers.0.experts.down_lora_a), base model text_config.num_experts = 16",
			"hidden size: adapter has 64 (layers.0.experts.down_lora_b), base model text_config.hidden_size = 128",
			"intermediate size: adapter has 32 (layers.0.experts.down_lora_a), base model text_config.moe_intermediate_size = 64",
			"expert LoRA for layer(s) 3-4, base model has 3 layers (text_config.num_hidden_layers)",
			"adapter_model.safetensors has LoRA for layer(s) 3-4",
		}},
		{"glm_style_fallback", `{"architectures": ["Glm4MoeForCausalLM"], "num_hidden_layers": 5, "n_routed_experts": 8, "hidden_size": 64,
			"moe_intermediate_size": 32, "first_k_dense_replace": 1}`, []string{"(1 mismatch)", "layer(s) 0, which are dense"}},
		{"mlp_only_layers_fallback", `{"num_hidden_layers": 5, "num_experts": 8, "hidden_size": 64, "moe_intermediate_size": 32, "mlp_only_layers": [1, 2]}`,
			[]string{"layer(s) 1-2, which are dense"}},
		{"qwen3moe_fixture_shape", "@qwen3moe-b", []string{"base model num_experts = 16", "base model has 3 layers"}},
		{"missing_moe_layers", qwen35Config(8, 8, 64, 32, ""), []string{"(1 mismatch)", "MoE layer(s) 5-7 have no expert LoRA"}},
		{"sparse_step", `{"num_hidden_layers": 5, "num_experts": 8, "hidden_size": 64, "moe_intermediate_size": 32, "decoder_sparse_step": 2}`,
			[]string{"layer(s) 0, 2, 4, which are dense"}},
		{"nonexpert_layers_beyond", qwen35Config(4, 8, 64, 32, ""), []string{
			"expert LoRA for layer(s) 4, base model has 4 layers",
			`adapter_model.safetensors has LoRA for layer(s) 4 (e.g. "base_model.model.model.layers.4.`,
		}},
		{"dense_model", `{"num_hidden_layers": 5, "hidden_size": 64, "intermediate_size": 32}`, []string{"base model has no routed experts"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := writeBase(t, tc.config)
			if name, ok := strings.CutPrefix(tc.config, "@"); ok {
				base = filepath.Join("..", "..", "testdata", "models", name)
			}
			sum, err := convert(t, Options{Input: in, Output: filepath.Join(t.TempDir(), "out"), BaseModel: base})
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if !sum.BaseChecked {
					t.Error("BaseChecked false for a local base model")
				}
				return
			}
			var me *mismatchError
			if !errors.As(err, &me) {
				t.Fatalf("err %v, want a mismatch list", err)
			}
			t.Logf("refused: %v", err)
			if !strings.Contains(err.Error(), filepath.Join(base, "config.json")) {
				t.Errorf("error does not name the base config file")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%s\ndoes not mention %q", err, w)
				}
			}
		})
	}
}

func TestBaseModelNotLocal(t *testing.T) {
	in := synth(t, smallSpec())
	var warns []string
	sum, err := convert(t, Options{Input: in, Output: filepath.Join(t.TempDir(), "out"), BaseModel: "Qwen/Qwen3.5-35B-A3B",
		Warn: func(s string) { warns = append(warns, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if sum.BaseChecked || len(warns) != 1 || !strings.Contains(warns[0], "checks skipped") {
		t.Errorf("BaseChecked %v, warnings %q", sum.BaseChecked, warns)
	}
	// A local directory without config.json, or with a broken one, is an error.
	for _, cfg := range []string{"", `{"num_hidden_layers": "five"}`, `{"hidden_size": 64}`, `[1]`, `{"num_hidden_layers": 5, "hidden_size": 64, "num_experts": 8, "mlp_only_layers": "x"}`} {
		base := writeBase(t, cfg)
		_, err := convert(t, Options{Input: in, Output: filepath.Join(t.TempDir(), "out"), BaseModel: base})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(base, "config.json")) {
			t.Errorf("config %q: err %v, want one naming %s", cfg, err, filepath.Join(base, "config.json"))
		}
	}
}

// TestBaseModelFixture checks the tiny transformers Qwen3.5 MoE checkpoints
// committed under testdata/models, when present.
func TestBaseModelFixture(t *testing.T) {
	for _, name := range []string{"qwen35moe-a", "qwen35moe-b"} {
		dir := filepath.Join("..", "..", "testdata", "models", name)
		data, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Skipf("fixture %s not present: %v", name, err)
		}
		bm, err := parseBaseConfig(dir, data)
		if err != nil {
			t.Fatal(err)
		}
		if bm.hidden != 64 || bm.experts != 8 || bm.inter != 32 || len(bm.moeLayers) != int(bm.layers) {
			t.Errorf("%s parsed as %+v", name, bm)
		}
	}
}

func FuzzParseBaseConfig(f *testing.F) {
	f.Add([]byte(qwen35Config(40, 256, 2048, 512, `, "mlp_only_layers": [0, 3]`)))
	f.Add([]byte(`{"num_hidden_layers": 4, "hidden_size": 8, "num_experts": 2, "decoder_sparse_step": 0, "first_k_dense_replace": 9}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		bm, err := parseBaseConfig("config.json", data)
		if err != nil {
			return
		}
		if bm.layers < 0 || bm.layers > 1<<20 || len(bm.moeLayers) > int(bm.layers) {
			t.Fatalf("implausible parse %+v", bm)
		}
	})
}
