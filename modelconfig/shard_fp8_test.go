package modelconfig

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// readAll loads every tensor of a fixture's model.safetensors into memory.
func readAll(t *testing.T, dir string) ([]safetensors.Tensor, map[string]string) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []safetensors.Tensor
	for _, ti := range f.Tensors() {
		x, _ := f.Tensor(ti.Name)
		x.Data = append([]byte(nil), x.Data...)
		ts = append(ts, x)
	}
	return ts, f.Metadata()
}

// TestShardedFixture splits a fixture into three shards with an index, as
// save_pretrained does for big models, and checks it.
func TestShardedFixture(t *testing.T) {
	dir := copyFixture(t, "qwen3next-a")
	ts, meta := readAll(t, dir)
	os.Remove(filepath.Join(dir, "model.safetensors"))
	weightMap := map[string]string{}
	per := (len(ts) + 2) / 3
	for s := 0; s < 3; s++ {
		name := fmt.Sprintf("model-%05d-of-00003.safetensors", s+1)
		part := ts[s*per : min(len(ts), (s+1)*per)]
		if err := safetensors.WriteFile(filepath.Join(dir, name), part, meta); err != nil {
			t.Fatal(err)
		}
		for _, x := range part {
			weightMap[x.Name] = name
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644)
	r, err := checkDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil || r.NumTensors != len(ts) {
		t.Errorf("sharded: %v, %d tensors", err, r.NumTensors)
	}
}

// TestFP8Checkpoint turns a fixture's expert weights into F8_E4M3 with
// block scales, as FP8 releases ship them, and checks the scale rules.
func TestFP8Checkpoint(t *testing.T) {
	for _, withScales := range []bool{true, false} {
		t.Run(fmt.Sprintf("scales=%v", withScales), func(t *testing.T) {
			dir := copyFixture(t, "qwen3moe-a")
			ts, meta := readAll(t, dir)
			var out []safetensors.Tensor
			for _, x := range ts {
				if strings.Contains(x.Name, ".experts.") && strings.HasSuffix(x.Name, ".weight") {
					x.DType = tensor.F8E4M3
					x.Data = make([]byte, x.NumElements())
					if withScales {
						// [32,64] or [64,32] with 16x16 blocks: ceil of each dim / 16.
						sc := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: x.Name + "_scale_inv", DType: tensor.F32,
							Shape: []int64{(x.Shape[0] + 15) / 16, (x.Shape[1] + 15) / 16}}}
						sc.Data = make([]byte, 4*sc.NumElements())
						out = append(out, sc)
					}
				}
				out = append(out, x)
			}
			if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), out, meta); err != nil {
				t.Fatal(err)
			}
			cfgPath := filepath.Join(dir, "config.json")
			b, _ := os.ReadFile(cfgPath)
			var m map[string]any
			json.Unmarshal(b, &m)
			m["quantization_config"] = map[string]any{"quant_method": "fp8", "weight_block_size": []int{16, 16}}
			b, _ = json.Marshal(m)
			os.WriteFile(cfgPath, b, 0o644)
			r, err := checkDir(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			if withScales {
				if err := r.Err(); err != nil || len(r.Unexpected) != 0 {
					t.Errorf("fp8 with scales: %v, unexpected %v", err, r.Unexpected)
				}
				if r.DTypeBytes[tensor.F8E4M3] == 0 {
					t.Error("no F8 bytes counted")
				}
				return
			}
			// 3 layers x 8 experts x 3 projections, each missing its scale.
			if len(r.Problems) != 72 || !strings.Contains(r.Problems[0], "weight_scale_inv: missing (want shape [2 4])") {
				t.Errorf("fp8 without scales: %d problems, first %q", len(r.Problems), r.Problems[0])
			}
		})
	}
}
