package modelconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMoEShape(t *testing.T) {
	cases := []struct {
		name, json string
		want       MoEShape
		err        string // substring of the error; "" for none
	}{
		{name: "deepseek-v3", json: `{"architectures":["DeepseekV3ForCausalLM"],"hidden_size":7168,"intermediate_size":18432,
			"moe_intermediate_size":2048,"n_routed_experts":256,"n_shared_experts":1,"num_experts_per_tok":8,"num_hidden_layers":61}`,
			want: MoEShape{Architecture: "DeepseekV3ForCausalLM", Experts: 256, Hidden: 7168, Intermediate: 2048, TopK: 8, Layers: 61}},
		{name: "qwen3-next", json: `{"architectures":["Qwen3NextForCausalLM"],"hidden_size":2048,"intermediate_size":5120,
			"moe_intermediate_size":512,"num_experts":512,"num_experts_per_tok":10}`,
			want: MoEShape{Architecture: "Qwen3NextForCausalLM", Experts: 512, Hidden: 2048, Intermediate: 512, TopK: 10}},
		{name: "nested text_config", json: `{"architectures":["Qwen3_5MoeForConditionalGeneration"],"vision_config":{"hidden_size":1152},
			"text_config":{"hidden_size":2048,"moe_intermediate_size":512,"num_experts":256,"num_experts_per_tok":8}}`,
			want: MoEShape{Architecture: "Qwen3_5MoeForConditionalGeneration", Experts: 256, Hidden: 2048, Intermediate: 512, TopK: 8}},
		{name: "language_config", json: `{"language_config":{"hidden_size":2560,"moe_intermediate_size":1408,"n_routed_experts":72,"num_experts_per_tok":6}}`,
			want: MoEShape{Experts: 72, Hidden: 2560, Intermediate: 1408, TopK: 6}},
		{name: "mixtral: the experts are the whole FFN", json: `{"architectures":["MixtralForCausalLM"],"hidden_size":4096,
			"intermediate_size":14336,"num_local_experts":8,"num_experts_per_tok":2}`,
			want: MoEShape{Architecture: "MixtralForCausalLM", Experts: 8, Hidden: 4096, Intermediate: 14336, TopK: 2}},
		{name: "experts_per_token", json: `{"hidden_size":2880,"intermediate_size":2880,"num_local_experts":128,"experts_per_token":4}`,
			want: MoEShape{Experts: 128, Hidden: 2880, Intermediate: 2880, TopK: 4}},
		{name: "integral float", json: `{"hidden_size":2048.0,"moe_intermediate_size":768,"num_experts":128,"num_experts_per_tok":8}`,
			want: MoEShape{Experts: 128, Hidden: 2048, Intermediate: 768, TopK: 8}},
		{name: "dense model", json: `{"architectures":["Qwen3ForCausalLM"],"hidden_size":4096,"intermediate_size":12288}`,
			err: "not an MoE model"},
		{name: "no top-k", json: `{"hidden_size":2048,"moe_intermediate_size":768,"num_experts":128}`, err: "num_experts_per_tok: missing"},
		{name: "top-k above experts", json: `{"hidden_size":2048,"moe_intermediate_size":768,"num_experts":4,"num_experts_per_tok":8}`,
			err: "more than the 4 routed experts"},
		{name: "all problems together", json: `{"hidden_size":-1,"moe_intermediate_size":"x","num_experts":0,"num_experts_per_tok":8}`,
			err: "num_experts: must be positive"},
		{name: "nested path named", json: `{"text_config":{"hidden_size":2048,"num_experts":8,"num_experts_per_tok":2}}`,
			err: "text_config.intermediate_size: missing"},
		{name: "text_config not an object", json: `{"text_config":3,"hidden_size":1}`, err: "text_config: not an object"},
		{name: "negative layers", json: `{"hidden_size":2048,"moe_intermediate_size":768,"num_experts":8,"num_experts_per_tok":2,"num_hidden_layers":-2}`,
			err: "num_hidden_layers: must not be negative"},
		{name: "not JSON", json: `{"hidden_size":`, err: "not a JSON object"},
		{name: "null", json: `null`, err: "not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseMoEShape([]byte(c.json))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestMoEShapeAgreesWithParse holds ParseMoEShape to Parse on every bundled
// test model: the two must not read one config differently.
func TestMoEShapeAgreesWithParse(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(fixtureDir, "*", "config.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		c, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := LoadMoEShape(dir)
		if err != nil {
			t.Fatal(err)
		}
		want := MoEShape{Architecture: c.Architecture, Experts: c.NumExperts, Hidden: c.HiddenSize, Intermediate: c.MoEIntermediateSize, TopK: c.TopK, Layers: c.NumLayers}
		if s != want {
			t.Errorf("%s: %+v, Parse says %+v", dir, s, want)
		}
	}
	if _, err := LoadMoEShape(t.TempDir()); err == nil {
		t.Error("a directory without config.json: no error")
	}
}

// FuzzParseMoEShape checks that no input panics and that an accepted shape
// is consistent.
func FuzzParseMoEShape(f *testing.F) {
	for _, d := range []string{"qwen3moe-a", "qwen35moe-a"} {
		b, err := os.ReadFile(filepath.Join(fixtureDir, d, "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"text_config":{"hidden_size":2048,"moe_intermediate_size":512,"n_routed_experts":8,"num_experts_per_tok":2}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseMoEShape(b)
		if err != nil {
			return
		}
		if s.Experts <= 0 || s.Hidden <= 0 || s.Intermediate <= 0 || s.TopK <= 0 || s.TopK > s.Experts || s.Experts > maxExperts || s.Layers < 0 {
			t.Fatalf("accepted an inconsistent shape %+v", s)
		}
	})
}
