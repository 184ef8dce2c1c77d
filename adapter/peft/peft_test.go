package peft

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestCleanKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "model.layers.0.self_attn.q_proj.lora_A.weight"},
		{"base_model.model.model.layers.1.mlp.orig_module.gate.lora_B.weight", "model.layers.1.mlp.gate.lora_B.weight"},
		{"model.layers.0.self_attn.o_proj.lora_B.weight", "model.layers.0.self_attn.o_proj.lora_B.weight"},
		{"base_model.model.lm_head.lora_embedding_A", "lm_head.lora_embedding_A"},
	}
	for _, tc := range tests {
		if got := CleanKey(tc.in); got != tc.want {
			t.Errorf("CleanKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTargetModule(t *testing.T) {
	tests := []struct {
		key  string
		want string
		ok   bool
	}{
		{"model.layers.0.self_attn.q_proj.lora_A.weight", "q_proj", true},
		{"model.layers.0.linear_attn.in_proj_qkv.lora_B.weight", "in_proj_qkv", true},
		{"model.embed_tokens.lora_embedding_A", "embed_tokens", true},
		{"lm_head.lora_embedding_B", "lm_head", true},
		// As in the reference converter, "embed_tokens" is matched first, so
		// "unembed_tokens" maps to embed_tokens.
		{"model.unembed_tokens.lora_embedding_B", "embed_tokens", true},
		{"model.lm_head.lora_embedding_B", "lm_head", true},
		{"q_proj.lora_A.weight", "q_proj", true},
		{"model.layers.0.input_layernorm.weight", "", false},
		{"model.layers.0.mlp.experts.3.down_proj.lora_B.weight", "down_proj", true},
	}
	for _, tc := range tests {
		got, ok := TargetModule(tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("TargetModule(%q) = %q, %v; want %q, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestOrderTargetModules(t *testing.T) {
	set := map[string]bool{}
	for _, m := range []string{"lm_head", "zeta", "down_proj", "q_proj", "out_proj", "alpha", "in_proj_a", "in_proj_qkv", "gate_proj"} {
		set[m] = true
	}
	want := []string{"q_proj", "gate_proj", "down_proj", "in_proj_qkv", "in_proj_a", "out_proj", "lm_head", "alpha", "zeta"}
	if got := OrderTargetModules(set); !reflect.DeepEqual(got, want) {
		t.Errorf("OrderTargetModules = %v, want %v", got, want)
	}
	if got := OrderTargetModules(nil); len(got) != 0 {
		t.Errorf("OrderTargetModules(nil) = %v, want empty", got)
	}
}

func TestTensorRank(t *testing.T) {
	tests := []struct {
		key   string
		shape []int64
		want  int64
		ok    bool
	}{
		{"model.layers.0.self_attn.q_proj.lora_A.weight", []int64{8, 2048}, 8, true},
		{"model.layers.0.self_attn.q_proj.lora_B.weight", []int64{8192, 8}, 8, true},
		{"model.embed_tokens.lora_embedding_A", []int64{16, 151936}, 16, true},
		{"model.embed_tokens.lora_embedding_B", []int64{2048, 16}, 16, true},
		{"model.layers.0.self_attn.q_proj.lora_A.weight", []int64{2, 8, 2048}, 0, false},
		{"model.norm.weight", []int64{2048, 1}, 0, false},
	}
	for _, tc := range tests {
		got, ok := TensorRank(tc.key, tc.shape)
		if got != tc.want || ok != tc.ok {
			t.Errorf("TensorRank(%q, %v) = %d, %v; want %d, %v", tc.key, tc.shape, got, ok, tc.want, tc.ok)
		}
	}
}

func TestIsExpertKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"model.layers.0.mlp.experts.7.gate_proj.lora_A.weight", true},
		{"model.layers.0.mlp.experts.7.down_proj.lora_B.weight", true},
		{"model.layers.0.mlp.shared_expert.gate_proj.lora_A.weight", false},
		{"model.layers.0.mlp.gate.lora_A.weight", false},
		{"model.layers.0.self_attn.q_proj.lora_A.weight", false},
		{"model.layers.0.mlp.experts.gate_up_proj", false},
	}
	for _, tc := range tests {
		if got := IsExpertKey(tc.key); got != tc.want {
			t.Errorf("IsExpertKey(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestPyFloat(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{
		{16, "16.0"}, {0.5, "0.5"}, {-0.0, "0.0"}, {1e-5, "1e-05"}, {0.0001, "0.0001"},
		{1e16, "1e+16"}, {1.5e16, "1.5e+16"}, {123456789012345.6, "123456789012345.6"},
		{1e15, "1000000000000000.0"}, {0.1, "0.1"}, {2.5e-7, "2.5e-07"}, {32, "32.0"},
	}
	for _, tc := range tests {
		if got := pyFloat(tc.f); got != tc.want {
			t.Errorf("pyFloat(%v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

func TestMarshalPython(t *testing.T) {
	// Expected texts are what CPython 3's json.dumps(v, indent=2, sort_keys=True) prints.
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"empty", map[string]any{}, "{}"},
		{"scalars", map[string]any{"b": true, "a": nil, "c": json.Number("8"), "d": Float(16)},
			"{\n  \"a\": null,\n  \"b\": true,\n  \"c\": 8,\n  \"d\": 16.0\n}"},
		{"nested", map[string]any{"t": []string{"q_proj", "v_proj"}, "p": map[string]any{}, "e": []any{}, "n": map[string]any{"z": json.Number("1.50"), "y": json.Number("1e-5")}},
			"{\n  \"e\": [],\n  \"n\": {\n    \"y\": 1e-05,\n    \"z\": 1.5\n  },\n  \"p\": {},\n  \"t\": [\n    \"q_proj\",\n    \"v_proj\"\n  ]\n}"},
		{"escapes", "a\"b\\c\n\x01é😀<&>", `"a\"b\\c\n\u0001\u00e9\ud83d\ude00<&>"`},
		{"bigint", json.Number("123456789012345678901234567890"), "123456789012345678901234567890"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MarshalPython(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	for _, bad := range []any{struct{}{}, Float(math.Inf(1)), math.NaN(), json.Number("1e400"), []any{json.Number("x")}} {
		if out, err := MarshalPython(bad); err == nil {
			t.Errorf("MarshalPython(%v) = %s, want an error", bad, out)
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"r": 8, "lora_alpha": 16, "target_modules": ["model.layers.0.q_proj", "o_proj", 3], "extra": {"k": [1, 2.0]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := c.Int("r"); !ok || r != 8 {
		t.Errorf("Int(r) = %d, %v", r, ok)
	}
	if _, ok := c.Int("lora_dropout"); ok {
		t.Error("Int of an absent field reported ok")
	}
	tm, ok := c.TargetModules()
	if want := []string{"q_proj", "o_proj", "3"}; !ok || !reflect.DeepEqual(tm, want) {
		t.Errorf("TargetModules = %v, %v; want %v", tm, ok, want)
	}
	clone := c.Clone()
	clone.Set("r", 4)
	clone.SetDefault("bias", "none")
	clone.SetDefault("r", 99)
	if r, _ := c.Int("r"); r != 8 {
		t.Error("Clone shares fields with the original")
	}
	out, err := clone.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"bias\": \"none\",\n  \"extra\": {\n    \"k\": [\n      1,\n      2.0\n    ]\n  },\n  \"lora_alpha\": 16,\n  \"r\": 4,\n  \"target_modules\": [\n    \"model.layers.0.q_proj\",\n    \"o_proj\",\n    3\n  ]\n}\n"
	if string(out) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", out, want)
	}

	c2, _ := ParseConfig([]byte(`{"target_modules": "all-linear"}`))
	if _, ok := c2.TargetModules(); ok {
		t.Error("TargetModules of a string reported ok")
	}

	for _, bad := range []string{``, `[]`, `{"a":1} x`, `{"a":NaN}`, `"s"`, `{`} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%q) succeeded, want an error", bad)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"r": 8, "lora_alpha": 16.0, "target_modules": ["q_proj"]}`))
	f.Add([]byte(`{"a": {"b": [1, 2e300, -0, "é"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		out, err := c.Marshal()
		if err != nil {
			return // e.g. numbers Python would also reject
		}
		// What we write must parse back to the same document.
		c2, err := ParseConfig(out)
		if err != nil {
			t.Fatalf("re-parse of %q failed: %v", out, err)
		}
		out2, err := c2.Marshal()
		if err != nil || string(out2) != string(out) {
			t.Fatalf("Marshal not stable:\n%s\n%s (%v)", out, out2, err)
		}
		c.TargetModules()
	})
}
