package safetensors

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestTransformersFixtures opens the checkpoints Hugging Face transformers
// wrote under testdata/models, checks the tensor names against the
// generator's record, and re-serialises each file with Writer: the result
// must be byte-identical to the Python safetensors output.
func TestTransformersFixtures(t *testing.T) {
	dirs, _ := filepath.Glob("../testdata/models/*/model.safetensors")
	if len(dirs) == 0 {
		t.Fatal("no fixtures under ../testdata/models")
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			f, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var ref struct {
				TensorNames []string `json:"tensor_names"`
			}
			b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &ref); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, ti := range f.Tensors() {
				names = append(names, ti.Name)
			}
			slices.Sort(names)
			slices.Sort(ref.TensorNames)
			if !slices.Equal(names, ref.TensorNames) {
				t.Errorf("tensor names differ from reference.json: %d vs %d", len(names), len(ref.TensorNames))
			}
			var ts []Tensor
			for _, ti := range f.Tensors() {
				x, err := f.Tensor(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := x.ToF32(); err != nil {
					t.Errorf("%s: %v", ti.Name, err)
				}
				ts = append(ts, x)
			}
			out := filepath.Join(t.TempDir(), "re.safetensors")
			if err := WriteFile(out, ts, f.Metadata()); err != nil {
				t.Fatal(err)
			}
			orig, _ := os.ReadFile(p)
			re, _ := os.ReadFile(out)
			if !bytes.Equal(orig, re) {
				t.Errorf("re-serialised file differs from the original (%d vs %d bytes)", len(re), len(orig))
			}
		})
	}
}
