package ktsynth

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

func TestModulesQwen35A3B(t *testing.T) {
	d := Qwen35A3B(4, 256)
	ms := d.Modules()
	// Layers 0-2 linear attention (5 modules), layer 3 full attention (4), plus 3 shared-expert modules each.
	if len(ms) != 3*5+4+4*3 {
		t.Fatalf("%d modules", len(ms))
	}
	want := map[string][2]int{
		"layers.0.linear_attn.in_proj_qkv":   {2048, 8192},
		"layers.0.linear_attn.in_proj_z":     {2048, 4096},
		"layers.0.linear_attn.in_proj_b":     {2048, 32},
		"layers.0.linear_attn.out_proj":      {4096, 2048},
		"layers.3.self_attn.q_proj":          {2048, 8192},
		"layers.3.self_attn.k_proj":          {2048, 512},
		"layers.3.self_attn.o_proj":          {4096, 2048},
		"layers.3.mlp.shared_expert.up_proj": {2048, 512},
	}
	got := map[string][2]int{}
	for _, m := range ms {
		got[m.Path] = [2]int{m.In, m.Out}
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: in/out %v, want %v", p, got[p], w)
		}
	}
}

func TestWriteDeterministic(t *testing.T) {
	s := Default(TinyQwen35())
	s.Layers = 2
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	if err := Write(a, s); err != nil {
		t.Fatal(err)
	}
	if err := Write(b, s); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{ktlora.FusedFile, peft.ModelFile, peft.ConfigFile} {
		x, err1 := os.ReadFile(filepath.Join(a, f))
		y, err2 := os.ReadFile(filepath.Join(b, f))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs with one seed (%v, %v)", f, err1, err2)
		}
	}
	f, err := safetensors.Open(filepath.Join(a, ktlora.FusedFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := len(f.Tensors()); n != 2*6 {
		t.Errorf("%d fused tensors, want 12", n)
	}
	ti, _ := f.Info("layers.1.experts.down_lora_b")
	if ti.DType != tensor.BF16 || len(ti.Shape) != 3 || ti.Shape[0] != 8 || ti.Shape[1] != 64 || ti.Shape[2] != 8 {
		t.Errorf("down_lora_b %s %v", ti.DType, ti.Shape)
	}
	tt, _ := f.Tensor("layers.1.experts.down_lora_b")
	vals, _ := tt.BF16()
	nonzero := 0
	for _, v := range vals {
		if f := tensor.BF16ToF32(v); f != 0 && f >= -0.5 && f <= 0.5 {
			nonzero++
		}
	}
	if nonzero < len(vals)*9/10 {
		t.Errorf("only %d of %d values are non-zero in [-0.5, 0.5]", nonzero, len(vals))
	}
	if err := Write(filepath.Join(t.TempDir(), "c"), Spec{Dims: TinyQwen35(), DType: tensor.I8}); err == nil {
		t.Error("Write accepted an I8 dtype")
	}
}
