package modeltest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/safetensors"
)

// tensorEntry is one tensor of a checkpoint a test writes.
type tensorEntry struct {
	spec safetensors.Spec
	data []byte
}

// writeCheckpoint writes es as dir/model.safetensors beside srcDir's
// config.json with quant (when not nil) as its quantization_config.
func writeCheckpoint(t *testing.T, dir, srcDir string, es []tensorEntry, quant map[string]any) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	specs := make([]safetensors.Spec, len(es))
	for i, e := range es {
		specs[i] = e.spec
	}
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if _, err := w.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(srcDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if quant != nil {
		cfg["quantization_config"] = quant
	}
	out, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}
