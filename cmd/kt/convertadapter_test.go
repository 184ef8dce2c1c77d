package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/adapter/ktsynth"
)

func TestConvertAdapterCLI(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "kt_out")
	s := ktsynth.Default(ktsynth.TinyQwen35())
	s.NoConfig = true
	if err := ktsynth.Write(in, s); err != nil {
		t.Fatal(err)
	}
	out, ex := filepath.Join(dir, "merged"), filepath.Join(dir, "expert")

	// No adapter_config.json: --lora-alpha is needed.
	_, _, err = runKT(t, "convert-adapter", in, out, "--base-model-name-or-path", "Qwen/Qwen3.5-35B-A3B")
	if err == nil || !strings.Contains(err.Error(), "--lora-alpha") {
		t.Fatalf("err %v, want a request for --lora-alpha", err)
	}
	// The base model flag is required, as in the reference script.
	if _, _, err := runKT(t, "convert-adapter", in, out, "--lora-alpha", "16"); err == nil || !strings.Contains(err.Error(), "base-model-name-or-path") {
		t.Fatalf("err %v, want a missing-flag error", err)
	}

	stdout, stderr, err := runKT(t, "convert-adapter", in, out, "--base-model-name-or-path", "Qwen/Qwen3.5-35B-A3B",
		"--lora-alpha", "16", "--expert-output-dir", ex)
	if err != nil {
		t.Fatal(err)
	}
	wantOut := "Converted KT fused expert LoRA adapter: 316 tensors, rank=8, target_modules=['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'in_proj_qkv', 'in_proj_z', 'in_proj_b', 'in_proj_a', 'out_proj']\n" +
		"Wrote expert adapter: 240 tensors, target_modules=['gate_proj', 'up_proj', 'down_proj'], output_dir=" + ex + "\n"
	if stdout != wantOut {
		t.Errorf("stdout\n%s\nwant\n%s", stdout, wantOut)
	}
	for _, w := range []string{"checks skipped", "writing " + out, "(100%)", "5 layers x 8 experts"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(out, "adapter_config.json"))
	if err != nil || !strings.Contains(string(cfg), `"lora_alpha": 16.0,`) || !strings.Contains(string(cfg), `"r": 8,`) {
		t.Errorf("adapter_config.json %s (%v)", cfg, err)
	}

	// A second run refuses the non-empty output unless --overwrite is given.
	if _, _, err := runKT(t, "convert-adapter", in, out, "--base-model-name-or-path", "b", "--lora-alpha", "16"); err == nil || !strings.Contains(err.Error(), out) {
		t.Errorf("err %v, want a refusal naming %s", err, out)
	}
	if _, _, err := runKT(t, "convert-adapter", in, out, "--base-model-name-or-path", "b", "--lora-alpha", "16", "--overwrite", "--progress=false"); err != nil {
		t.Errorf("--overwrite: %v", err)
	}

	// --overwrite never replaces a directory kt did not write, nor one
	// holding the working directory or the base model; nothing is removed.
	base := filepath.Join(dir, "models", "base")
	work := filepath.Join(dir, "a", "b")
	for _, d := range []string{base, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	for _, c := range []struct {
		out, base, want string
	}{
		{"../..", "b", "output " + dir + ": contains the working directory " + work},
		{".", "b", "output " + work + ": is the working directory"},
		{base, base, "output " + base + ": is the base model directory"},
		{filepath.Join(dir, "models"), base, "contains the base model directory " + base},
		{filepath.Join(dir, "a"), "b", "contains the working directory"},
		{in + "/..", "b", "output " + dir + ": contains the working directory"},
		{filepath.Join(dir, "models", "base", ".."), "Qwen/Qwen3.5-35B-A3B", "output " + filepath.Join(dir, "models") + ": directory is not empty and has no .kt-convert-adapter marker"},
	} {
		_, _, err := runKT(t, "convert-adapter", in, c.out, "--base-model-name-or-path", c.base, "--lora-alpha", "16", "--overwrite", "--progress=false")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OUT %s: err %v, want %q", c.out, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "config.json")); err != nil {
		t.Errorf("base model: %v", err)
	}
	if _, err := os.Stat(filepath.Join(in, "fused_expert_lora.safetensors")); err != nil {
		t.Errorf("input: %v", err)
	}
}
