package modelconfig

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/safetensors"
)

// copyFixture copies a fixture directory into a temp dir.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join(fixtureDir, name)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// rewrite re-saves dir/model.safetensors through edit, which may drop or
// alter tensors.
func rewrite(t *testing.T, dir string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	p := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, ti := range f.Tensors() {
		x, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		x.Data = bytes.Clone(x.Data)
		x.Shape = append([]int64(nil), x.Shape...)
		ts = append(ts, x)
	}
	meta := f.Metadata()
	f.Close()
	if err := safetensors.WriteFile(p, edit(ts), meta); err != nil {
		t.Fatal(err)
	}
}

func checkDir(t *testing.T, dir string) (*Report, error) {
	t.Helper()
	c, err := Load(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	return Check(c, ck), nil
}

func TestCorruptedFixtures(t *testing.T) {
	t.Run("truncated", func(t *testing.T) {
		dir := copyFixture(t, "qwen3moe-a")
		p := filepath.Join(dir, "model.safetensors")
		st, _ := os.Stat(p)
		if err := os.Truncate(p, st.Size()-100); err != nil {
			t.Fatal(err)
		}
		_, err := checkDir(t, dir)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("header tampered", func(t *testing.T) {
		dir := copyFixture(t, "qwen3next-a")
		p := filepath.Join(dir, "model.safetensors")
		b, _ := os.ReadFile(p)
		n := binary.LittleEndian.Uint64(b)
		hdr := string(b[8 : 8+n])
		i := strings.Index(hdr, `"BF16"`)
		b2 := bytes.Clone(b)
		copy(b2[8+i:], `"BX16"`)
		os.WriteFile(p, b2, 0o644)
		if _, err := checkDir(t, dir); err == nil || !strings.Contains(err.Error(), `unknown dtype "BX16"`) {
			t.Errorf("dtype tamper: err = %v", err)
		}
		// A length prefix pointing past the end of the file.
		b3 := bytes.Clone(b)
		binary.LittleEndian.PutUint64(b3, uint64(len(b)))
		os.WriteFile(p, b3, 0o644)
		if _, err := checkDir(t, dir); err == nil || !strings.Contains(err.Error(), "runs past the end") {
			t.Errorf("length tamper: err = %v", err)
		}
		// A shape that no longer matches its byte range.
		i = strings.Index(hdr, `"shape":[`)
		j := i + len(`"shape":[`)
		b4 := bytes.Clone(b)
		if b4[8+j] >= '1' && b4[8+j] <= '8' {
			b4[8+j]++
		} else {
			b4[8+j] = '1'
		}
		os.WriteFile(p, b4, 0o644)
		if _, err := checkDir(t, dir); err == nil || !strings.Contains(err.Error(), "needs") {
			t.Errorf("shape tamper: err = %v", err)
		}
	})
	t.Run("missing and wrong shape", func(t *testing.T) {
		dir := copyFixture(t, "qwen35moe-a")
		drop := "model.language_model.layers.0.linear_attn.A_log"
		reshape := "model.language_model.layers.3.self_attn.q_proj.weight"
		rewrite(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
			var out []safetensors.Tensor
			for _, x := range ts {
				switch x.Name {
				case drop:
					continue
				case reshape:
					x.Shape = []int64{x.Shape[0] / 2, x.Shape[1] * 2}
				}
				out = append(out, x)
			}
			return out
		})
		r, err := checkDir(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Problems) != 2 {
			t.Fatalf("problems = %q, want 2", r.Problems)
		}
		all := strings.Join(r.Problems, "\n")
		if !strings.Contains(all, drop+": missing") || !strings.Contains(all, reshape+": shape [256 128], config implies [512 64]") {
			t.Errorf("problems:\n%s", all)
		}
		if err := r.Err(); err == nil || !strings.Contains(err.Error(), "2 problems") {
			t.Errorf("Err() = %v", err)
		}
	})
	t.Run("wrong dtype and stray tensor", func(t *testing.T) {
		dir := copyFixture(t, "qwen3moe-b")
		rewrite(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == "model.norm.weight" {
					ts[i].DType = 9 // I32: same element size as two BF16s would not match, so halve the shape
					ts[i].Shape = []int64{ts[i].Shape[0] / 2}
				}
			}
			return append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: "model.layers.0.mlp.extra", DType: 3, Shape: []int64{1}}, Data: make([]byte, 4)})
		})
		r, err := checkDir(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(r.Problems, "\n")
		if !strings.Contains(all, "model.norm.weight: shape [32], config implies [64]") || !strings.Contains(all, "model.norm.weight: dtype I32 is not a weight type") {
			t.Errorf("problems:\n%s", all)
		}
		if len(r.Unexpected) != 1 || r.Unexpected[0] != "model.layers.0.mlp.extra" {
			t.Errorf("unexpected = %v", r.Unexpected)
		}
	})
	t.Run("config says more layers", func(t *testing.T) {
		dir := copyFixture(t, "qwen3moe-a")
		p := filepath.Join(dir, "config.json")
		b, _ := os.ReadFile(p)
		os.WriteFile(p, bytes.Replace(b, []byte(`"num_hidden_layers": 3`), []byte(`"num_hidden_layers": 4`), 1), 0o644)
		r, err := checkDir(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		// Layer 3: 2 norms, 4 attention weights, 2 qk norms, router, 8 experts x 3.
		if len(r.Problems) != 2+4+2+1+8*3 {
			t.Errorf("got %d problems, want %d:\n%s", len(r.Problems), 33, strings.Join(r.Problems, "\n"))
		}
		for _, p := range r.Problems {
			if !strings.HasPrefix(p, "model.layers.3.") {
				t.Errorf("problem outside layer 3: %s", p)
			}
		}
	})
}
