package safetensors

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// BenchmarkOpen measures opening and validating a file with many tensors
// (header parsing dominates).
func BenchmarkOpen(b *testing.B) {
	p := filepath.Join(b.TempDir(), "many.safetensors")
	var ts []Tensor
	for i := range 2000 {
		ts = append(ts, Tensor{TensorInfo: TensorInfo{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.up_proj.weight", i/100, i%100), DType: tensor.BF16, Shape: []int64{4, 8}}, Data: make([]byte, 64)})
	}
	if err := WriteFile(p, ts, map[string]string{"format": "pt"}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		f, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
