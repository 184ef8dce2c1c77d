package lora

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// FuzzParseModuleKey: any key parses or is refused with an error naming
// it; a parsed key round-trips through its canonical form.
func FuzzParseModuleKey(f *testing.F) {
	for _, k := range []string{
		"model.layers.0.self_attn.q_proj.lora_A.weight",
		"base_model.model.model.layers.12.linear_attn.in_proj_qkv.lora_B.default.weight",
		"base_model.model.model.language_model.layers.3.mlp.shared_expert.gate_proj.lora_A.weight",
		"base_model.model.lm_head.lora_A.weight",
		"model.layers.01.self_attn.q_proj.lora_A.weight",
		"model.layers.9999999.self_attn.q_proj.lora_A.weight",
		"layers..lora_A.weight",
		"model.layers.0.lora_A.weight",
		"x.layers.0.q.lora_C.weight",
		"",
	} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		layer, module, factor, err := parseModuleKey(key)
		if err != nil {
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("error %q does not name the key %q", err, key)
			}
			return
		}
		if layer < 0 || layer > 999999 || module == "" || (factor != "A" && factor != "B") {
			t.Fatalf("%q: layer %d module %q factor %q", key, layer, module, factor)
		}
		canon := "model.layers." + strconv.Itoa(layer) + "." + module + ".lora_" + factor + ".weight"
		l2, m2, f2, err := parseModuleKey(canon)
		if err != nil || l2 != layer || m2 != module || f2 != factor {
			t.Fatalf("%q -> %q: %d %q %q %v", key, canon, l2, m2, f2, err)
		}
	})
}

// FuzzLoad: adapter directories of arbitrary bytes load or are refused
// with an error naming the directory, never a panic; an adapter that
// loads passes CheckExperts or says why, and its modules bind or say why.
func FuzzLoad(f *testing.F) {
	good := writeAdapter(f, cfgR2, append(qProj(tensor.BF16, "base_model.model."), experts(0, 1, tensor.BF16)...))
	cfg, err := os.ReadFile(filepath.Join(good, "adapter_config.json"))
	if err != nil {
		f.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join(good, "adapter_model.safetensors"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cfg, st)
	f.Add([]byte(`{"r": 2, "use_rslora": true}`), st)
	f.Add([]byte(`{"r": 1e400}`), st)
	f.Add(cfg, st[:len(st)/2])
	f.Add([]byte(`[]`), []byte{})
	f.Fuzz(func(t *testing.T, cfg, st []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), st, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, part := range []Part{Composite, ExpertOnly, Static} {
			a, err := Load("x", dir, part)
			if err != nil {
				if !strings.Contains(err.Error(), dir) {
					t.Fatalf("error %q does not name the adapter directory", err)
				}
				continue
			}
			if a.Rank < 1 || a.Scale <= 0 {
				t.Fatalf("loaded rank %d scale %g", a.Rank, a.Scale)
			}
			if _, err := a.Module(0, "self_attn.q_proj", hid, hid); err != nil && !strings.Contains(err.Error(), dir) {
				t.Fatalf("Module error %q does not name the directory", err)
			}
			if err := a.CheckExperts([]bool{true, true}, 2, hid, inter); err != nil && !strings.Contains(err.Error(), dir) {
				t.Fatalf("CheckExperts error %q does not name the directory", err)
			}
			_ = a.Unused()
		}
	})
}
