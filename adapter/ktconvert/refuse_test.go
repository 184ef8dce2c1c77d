package ktconvert

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/tensor"
)

// fusedSpecs returns a complete, consistent fused layer set.
func fusedSpecs(layers []int, e, r, h, i int64) map[string][]int64 {
	m := map[string][]int64{}
	for _, l := range layers {
		for _, k := range ktlora.Kinds {
			m[ktlora.FusedKey(l, k)] = k.Shape(e, r, h, i)
		}
	}
	return m
}

// TestRefusals checks every refusal: each must fail before anything is
// written, with a message naming the offending tensor or path.
func TestRefusals(t *testing.T) {
	type env struct{ root, in, out string }
	tests := []struct {
		name  string
		setup func(t *testing.T, e *env) Options
		want  []string // substrings of the error; "$IN", "$OUT" and "$ROOT" are replaced
	}{
		{"unexpected_key", func(t *testing.T, e *env) Options {
			m := fusedSpecs([]int{0}, 2, 4, 8, 6)
			m["model.layers.0.mlp.experts.gate_lora_a"] = []int64{2, 4, 8}
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), m, tensor.F32)
			return Options{}
		}, []string{"unexpected key", `model.layers.0.mlp.experts.gate_lora_a`, ktlora.FusedFile}},
		{"unsupported_kt_name", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), map[string][]int64{"layers.0.experts.unknown_lora_a": {2, 3, 5}}, tensor.F32)
			return Options{}
		}, []string{"unexpected key", "layers.0.experts.unknown_lora_a", "unsupported KT fused expert LoRA tensor"}},
		{"not_3d", func(t *testing.T, e *env) Options {
			m := fusedSpecs([]int{0}, 2, 4, 8, 6)
			m["layers.0.experts.up_lora_b"] = []int64{12, 4}
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), m, tensor.F32)
			return Options{}
		}, []string{`"layers.0.experts.up_lora_b" must be 3-D`, "[12 4]"}},
		{"inconsistent_expert_count", func(t *testing.T, e *env) Options {
			m := fusedSpecs([]int{0, 1}, 2, 4, 8, 6)
			m["layers.1.experts.down_lora_a"] = []int64{3, 4, 6}
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), m, tensor.F32)
			return Options{}
		}, []string{"inconsistent expert counts", "2 (layers.0.experts.down_lora_a)", "3 (layers.1.experts.down_lora_a)"}},
		{"inconsistent_rank", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), map[string][]int64{
				"layers.0.experts.gate_lora_a": {2, 3, 5}, "layers.0.experts.gate_lora_b": {2, 7, 4},
			}, tensor.F32)
			return Options{}
		}, []string{"inconsistent LoRA ranks", "3 (layers.0.experts.gate_lora_a)", "4 (layers.0.experts.gate_lora_b)"}},
		{"inconsistent_hidden", func(t *testing.T, e *env) Options {
			m := fusedSpecs([]int{0}, 2, 4, 8, 6)
			m["layers.0.experts.down_lora_b"] = []int64{2, 16, 4}
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), m, tensor.F32)
			return Options{}
		}, []string{"inconsistent hidden sizes", "16 (layers.0.experts.down_lora_b)"}},
		{"incomplete_layer", func(t *testing.T, e *env) Options {
			m := fusedSpecs([]int{0, 1}, 2, 4, 8, 6)
			delete(m, "layers.1.experts.up_lora_b")
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), m, tensor.F32)
			return Options{}
		}, []string{"layer 1 is incomplete", "layers.1.experts.up_lora_b"}},
		{"no_tensors", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), map[string][]int64{}, tensor.F32)
			return Options{}
		}, []string{"no tensors found", ktlora.FusedFile}},
		{"nonexpert_rank_differs", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeST(t, filepath.Join(e.in, peft.ModelFile), map[string][]int64{
				"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {4, 8},
				"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": {16, 8},
			}, tensor.F32)
			return Options{}
		}, []string{"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", "LoRA rank 8", "expert LoRA rank is 4", peft.ModelFile}},
		{"duplicate_cleaned_key", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeST(t, filepath.Join(e.in, peft.ModelFile), map[string][]int64{
				"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight":             {4, 8},
				"base_model.model.model.layers.0.self_attn.q_proj.orig_module.lora_A.weight": {4, 8},
			}, tensor.F32)
			return Options{}
		}, []string{"duplicate output tensor key", "model.layers.0.self_attn.q_proj.lora_A.weight"}},
		{"nonexpert_key_collides_with_expert", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeST(t, filepath.Join(e.in, peft.ModelFile), map[string][]int64{
				"base_model.model.model.layers.0.mlp.experts.1.up_proj.lora_A.weight": {4, 8},
			}, tensor.F32)
			return Options{}
		}, []string{"duplicate output tensor key", "model.layers.0.mlp.experts.1.up_proj.lora_A.weight", "layers.0.experts.up_lora_a"}},
		{"missing_fused", func(t *testing.T, e *env) Options {
			os.MkdirAll(e.in, 0o755)
			return Options{}
		}, []string{"missing " + ktlora.FusedFile, "$IN/" + ktlora.FusedFile}},
		{"input_not_a_directory", func(t *testing.T, e *env) Options {
			return Options{}
		}, []string{"input directory not found", "$IN"}},
		{"corrupt_fused", func(t *testing.T, e *env) Options {
			os.MkdirAll(e.in, 0o755)
			os.WriteFile(filepath.Join(e.in, ktlora.FusedFile), []byte("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":"), 0o644)
			return Options{}
		}, []string{"$IN/" + ktlora.FusedFile}},
		{"bad_adapter_config", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.WriteFile(filepath.Join(e.in, peft.ConfigFile), []byte(`{"lora_alpha": 16,}`), 0o644)
			return Options{}
		}, []string{"$IN/" + peft.ConfigFile, "invalid JSON"}},
		{"unwritable_adapter_config", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.WriteFile(filepath.Join(e.in, peft.ConfigFile), []byte(`{"lora_alpha": 16, "lora_dropout": 1e999}`), 0o644)
			return Options{}
		}, []string{"$IN/" + peft.ConfigFile, "1e999"}},
		{"nan_lora_alpha", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{LoraAlpha: f64(math.NaN())}
		}, []string{"--lora-alpha NaN"}},
		{"no_lora_alpha", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{LoraAlpha: nil}
		}, []string{"no adapter_config.json with lora_alpha found in $IN", "--lora-alpha"}},
		{"nonexpert_output_without_nonexpert_tensors", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{NonexpertOutput: filepath.Join(e.root, "nx")}
		}, []string{"cannot write non-expert adapter $ROOT/nx", peft.ModelFile}},
		{"out_not_empty", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(e.out, 0o755)
			os.WriteFile(filepath.Join(e.out, "existing.txt"), []byte("do not remove"), 0o644)
			return Options{}
		}, []string{"$OUT", "not empty", "--overwrite"}},
		{"expert_out_not_empty", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(filepath.Join(e.root, "ex"), 0o755)
			os.WriteFile(filepath.Join(e.root, "ex", "x"), nil, 0o644)
			return Options{ExpertOutput: filepath.Join(e.root, "ex")}
		}, []string{"expert output $ROOT/ex", "not empty"}},
		{"out_is_a_file", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.WriteFile(e.out, nil, 0o644)
			return Options{Overwrite: true}
		}, []string{"$OUT", "not a directory"}},
		{"out_equals_in", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{Output: e.in + "/./", Overwrite: true}
		}, []string{"output $IN", "must be different from the input directory"}},
		{"out_inside_in", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{Output: filepath.Join(e.in, "sglang"), Overwrite: true}
		}, []string{"output $IN/sglang", "inside the input directory $IN"}},
		{"out_contains_in", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{Output: e.root, Overwrite: true}
		}, []string{"output $ROOT", "contains the input directory $IN"}},
		{"out_symlink_to_in", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.Symlink(e.in, e.out)
			return Options{Overwrite: true}
		}, []string{"must be different from the input directory"}},
		{"expert_out_inside_in", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{ExpertOutput: filepath.Join(e.in, "ex")}
		}, []string{"expert output $IN/ex", "inside the input directory"}},
		{"expert_out_equals_out", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{ExpertOutput: e.out}
		}, []string{"expert output $OUT", "must be distinct"}},
		{"nonexpert_out_inside_out", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeST(t, filepath.Join(e.in, peft.ModelFile), map[string][]int64{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {4, 8}}, tensor.F32)
			return Options{NonexpertOutput: filepath.Join(e.out, "nx")}
		}, []string{"non-expert output $OUT/nx", "inside the output $OUT"}},
		{"out_is_working_directory", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(filepath.Join(e.root, "work"), 0o755)
			t.Chdir(filepath.Join(e.root, "work"))
			return Options{Output: ".", Overwrite: true}
		}, []string{"output $ROOT/work: is the working directory"}},
		{"out_contains_working_directory", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(filepath.Join(e.root, "a", "b", "work"), 0o755)
			t.Chdir(filepath.Join(e.root, "a", "b", "work"))
			return Options{Output: "../..", Overwrite: true}
		}, []string{"output $ROOT/a: contains the working directory $ROOT/a/b/work"}},
		{"expert_out_contains_working_directory", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(filepath.Join(e.root, "a", "work"), 0o755)
			t.Chdir(filepath.Join(e.root, "a", "work"))
			return Options{ExpertOutput: "..", Overwrite: true}
		}, []string{"expert output $ROOT/a: contains the working directory"}},
		{"out_contains_in_relative", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			t.Chdir(e.in)
			return Options{Input: ".", Output: "..", Overwrite: true}
		}, []string{"output $ROOT: contains the working directory $IN"}},
		{"out_is_base_model", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeBaseDir(t, filepath.Join(e.root, "base"))
			return Options{Output: filepath.Join(e.root, "base"), BaseModel: filepath.Join(e.root, "base"), Overwrite: true}
		}, []string{"output $ROOT/base: is the base model directory"}},
		{"out_contains_base_model", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeBaseDir(t, filepath.Join(e.root, "models", "base"))
			return Options{Output: filepath.Join(e.root, "models"), BaseModel: filepath.Join(e.root, "models", "base") + "/", Overwrite: true}
		}, []string{"output $ROOT/models: contains the base model directory $ROOT/models/base"}},
		{"out_symlink_to_base_model", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeBaseDir(t, filepath.Join(e.root, "base"))
			os.Symlink(filepath.Join(e.root, "base"), e.out)
			return Options{BaseModel: filepath.Join(e.root, "base"), Overwrite: true}
		}, []string{"output $ROOT/base: is the base model directory"}},
		{"base_model_symlink_to_out", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeBaseDir(t, e.out)
			os.Symlink(e.out, filepath.Join(e.root, "link"))
			return Options{BaseModel: filepath.Join(e.root, "link"), Overwrite: true}
		}, []string{"output $OUT: is the base model directory"}},
		{"out_not_written_by_kt", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(e.out, 0o755)
			os.WriteFile(filepath.Join(e.out, "existing.txt"), []byte("do not remove"), 0o644)
			return Options{Overwrite: true}
		}, []string{"output $OUT: directory is not empty and has no " + MarkerFile + " marker", "refusing to replace it"}},
		{"out_hidden_file_only", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(filepath.Join(e.out, ".git"), 0o755)
			return Options{Overwrite: true}
		}, []string{"output $OUT: directory is not empty and has no " + MarkerFile + " marker"}},
		{"marker_not_a_file", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(filepath.Join(e.out, MarkerFile), 0o755)
			return Options{Overwrite: true}
		}, []string{"output $OUT: directory is not empty and has no " + MarkerFile + " marker"}},
		{"marker_symlink", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(filepath.Join(e.root, "real"), 0o755)
			os.WriteFile(filepath.Join(e.root, "real", MarkerFile), []byte(markerText), 0o644)
			os.MkdirAll(e.out, 0o755)
			os.Symlink(filepath.Join(e.root, "real", MarkerFile), filepath.Join(e.out, MarkerFile))
			return Options{Overwrite: true}
		}, []string{"output $OUT: directory is not empty and has no " + MarkerFile + " marker"}},
		{"nonexpert_out_not_written_by_kt", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			writeST(t, filepath.Join(e.in, peft.ModelFile), map[string][]int64{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {4, 8}}, tensor.F32)
			os.MkdirAll(filepath.Join(e.root, "nx"), 0o755)
			os.WriteFile(filepath.Join(e.root, "nx", "notes"), nil, 0o644)
			return Options{NonexpertOutput: filepath.Join(e.root, "nx"), Overwrite: true}
		}, []string{"non-expert output $ROOT/nx: directory is not empty and has no " + MarkerFile + " marker"}},
		{"marked_out_without_overwrite", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			os.MkdirAll(e.out, 0o755)
			os.WriteFile(filepath.Join(e.out, MarkerFile), []byte(markerText), 0o644)
			return Options{}
		}, []string{"output $OUT: directory is not empty (pass --overwrite to replace it)"}},
		{"no_base_model", func(t *testing.T, e *env) Options {
			writeST(t, filepath.Join(e.in, ktlora.FusedFile), fusedSpecs([]int{0}, 2, 4, 8, 6), tensor.F32)
			return Options{BaseModel: "-"}
		}, []string{"--base-model-name-or-path is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := filepath.EvalSymlinks(t.TempDir())
			e := &env{root: root, in: filepath.Join(root, "in"), out: filepath.Join(root, "out")}
			o := tc.setup(t, e)
			if o.Input == "" {
				o.Input = e.in
			}
			if o.Output == "" {
				o.Output = e.out
			}
			switch o.BaseModel {
			case "":
				o.BaseModel = "/models/base"
			case "-":
				o.BaseModel = ""
			}
			if o.LoraAlpha == nil && tc.name != "no_lora_alpha" {
				o.LoraAlpha = f64(8)
			}
			before := snapshot(t, root)
			_, err := convert(t, o)
			if err == nil {
				t.Fatal("conversion succeeded, want a refusal")
			}
			t.Logf("refused: %v", err)
			for _, w := range tc.want {
				w = strings.NewReplacer("$IN", e.in, "$OUT", e.out, "$ROOT", e.root).Replace(w)
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not mention %q", err, w)
				}
			}
			if after := snapshot(t, root); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused run changed the file tree:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// snapshot lists every path under root with its size.
func snapshot(t *testing.T, root string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			m[p] = fi.Size()
		}
		return nil
	})
	return m
}

// writeBaseDir makes dir a stand-in base model directory: a config.json and
// a weight file a wrong --overwrite would destroy.
func writeBaseDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"config.json": `{"model_type": "unknown"}`, "model.safetensors": "weights"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
