package ktconvert

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/ktsynth"
	"github.com/ktserve/kt/adapter/peft"
)

// fixtureSpec is the committed tiny KT SFT output under
// testdata/tiny_qwen35/kt_sft: shapes of testdata/models/qwen35moe-b (the
// tiny transformers Qwen3_5MoeForCausalLM), rank 8, alpha 16, bf16, values
// in [-0.05, 0.05). tools/adapter/peft_check.py loads its converted form
// (testdata/tiny_qwen35/merged) with peft on that model.
func fixtureSpec() ktsynth.Spec {
	s := ktsynth.Default(ktsynth.TinyQwen35())
	s.Scale = 0.1
	return s
}

// TestFixture regenerates the committed fixture and converts it, and
// requires both to be byte-identical to the committed files (rewrite them
// with -update). The converted output is what peft_check.py checked on the
// GPU machine, so any change to the converter's bytes shows up here.
func TestFixture(t *testing.T) {
	dir := filepath.Join("testdata", "tiny_qwen35")
	in := filepath.Join(t.TempDir(), "kt_sft")
	if err := ktsynth.Write(in, fixtureSpec()); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "merged")
	base := filepath.Join("..", "..", "testdata", "models", "qwen35moe-b")
	if _, err := os.Stat(filepath.Join(base, "config.json")); err != nil {
		base = "Qwen/Qwen3.5-35B-A3B-tiny" // fixture absent: convert without the base check
	}
	sum, err := Convert(context.Background(), Options{Input: in, Output: out, BaseModel: "testdata/models/qwen35moe-b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Convert(context.Background(), Options{Input: in, Output: filepath.Join(t.TempDir(), "checked"), BaseModel: base}); err != nil {
		t.Fatalf("fixture does not match %s: %v", base, err)
	}
	if sum.TensorCount != 316 {
		t.Errorf("%d tensors", sum.TensorCount)
	}
	for _, f := range []struct{ got, rel string }{
		{filepath.Join(in, ktlora.FusedFile), "kt_sft/" + ktlora.FusedFile},
		{filepath.Join(in, peft.ModelFile), "kt_sft/" + peft.ModelFile},
		{filepath.Join(in, peft.ConfigFile), "kt_sft/" + peft.ConfigFile},
		{filepath.Join(out, peft.ModelFile), "merged/" + peft.ModelFile},
		{filepath.Join(out, peft.ConfigFile), "merged/" + peft.ConfigFile},
	} {
		got, err := os.ReadFile(f.got)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, f.rel)
		if *update {
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the committed fixture (%d vs %d bytes)", f.rel, len(got), len(want))
		}
	}
}
