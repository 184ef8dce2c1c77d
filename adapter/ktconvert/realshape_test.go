package ktconvert

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/ktsynth"
	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/safetensors"
)

// TestRealLayerShapes converts one layer of Qwen3.5-35B-A3B at its real
// widths (256 experts, hidden 2048, moe_intermediate 512, rank 8, bf16:
// 31.5 MB of expert LoRA per layer) and checks that the Go heap stays far
// below the adapter's size while it streams.
func TestRealLayerShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~70 MB; skipped with -short")
	}
	spec := ktsynth.Default(ktsynth.Qwen35A3B(1, 256))
	in := synth(t, spec)
	fi, err := os.Stat(filepath.Join(in, ktlora.FusedFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(256 * 61440 * 2); fi.Size() < want {
		t.Fatalf("fused file %d bytes, want at least %d", fi.Size(), want)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	out := filepath.Join(t.TempDir(), "out")
	sum, err := Convert(context.Background(), Options{Input: in, Output: out, BaseModel: writeBase(t, qwen35Config(1, 256, 2048, 512, "")),
		Progress: func(p Progress) {
			if p.DoneTensors%128 == 0 {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.TensorCount != 256*6+2*8 {
		t.Errorf("%d tensors, want %d", sum.TensorCount, 256*6+2*8)
	}
	growth := int64(peak) - int64(base)
	t.Logf("adapter %d bytes, Go heap growth while converting %d bytes", sum.Outputs[0].Bytes, growth)
	if growth > sum.Outputs[0].Bytes/4 {
		t.Errorf("heap grew by %d bytes converting a %d-byte adapter: tensors are not streamed", growth, sum.Outputs[0].Bytes)
	}
	f, err := safetensors.Open(filepath.Join(out, peft.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for key, shape := range map[string][]int64{
		"model.layers.0.mlp.experts.255.gate_proj.lora_A.weight":   {8, 2048},
		"model.layers.0.mlp.experts.0.up_proj.lora_B.weight":       {512, 8},
		"model.layers.0.mlp.experts.17.down_proj.lora_A.weight":    {8, 512},
		"model.layers.0.mlp.experts.17.down_proj.lora_B.weight":    {2048, 8},
		"model.layers.0.linear_attn.in_proj_qkv.lora_B.weight":     {8192, 8},
		"model.layers.0.mlp.shared_expert.down_proj.lora_A.weight": {8, 512},
	} {
		ti, ok := f.Info(key)
		if !ok || len(ti.Shape) != 2 || ti.Shape[0] != shape[0] || ti.Shape[1] != shape[1] {
			t.Errorf("%s: %v, want shape %v", key, ti.Shape, shape)
		}
	}
}

// BenchmarkConvert measures conversion throughput on two layers of
// Qwen3.5-35B-A3B widths with 64 experts (bf16, rank 8), merged output only.
func BenchmarkConvert(b *testing.B) {
	in := synth(b, ktsynth.Default(ktsynth.Qwen35A3B(2, 64)))
	root := b.TempDir()
	var bytes int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sum, err := Convert(context.Background(), Options{Input: in, Output: filepath.Join(root, "out"), BaseModel: "b", Overwrite: true})
		if err != nil {
			b.Fatal(err)
		}
		bytes = sum.Outputs[0].Bytes
	}
	b.SetBytes(bytes)
}
