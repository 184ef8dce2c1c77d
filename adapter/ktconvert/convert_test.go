package ktconvert

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/ktsynth"
	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/tensor"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// checkGolden compares got with testdata/name, rewriting it under -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// TestMergedAndSplitAgree converts a synthetic Qwen3.5 MoE KT SFT output with
// split outputs and checks, tensor by tensor, that the merged adapter is the
// disjoint union of the expert and non-expert adapters, that every expert
// tensor is the right slice of its fused stack, that non-expert tensors are
// the input tensors under cleaned keys, and that SGLang's startup split of
// the merged adapter gives back the same two halves.
func TestMergedAndSplitAgree(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec func() ktsynth.Spec
	}{
		{"bf16", smallSpec},
		{"f32_language_model_prefix", func() ktsynth.Spec {
			s := smallSpec()
			s.DType = tensor.F32
			s.Layers = 2
			s.KeyPrefix = "base_model.model.model.language_model."
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec()
			in := synth(t, spec)
			root := t.TempDir()
			out, ex, nx := filepath.Join(root, "merged"), filepath.Join(root, "expert"), filepath.Join(root, "nonexpert")
			var last Progress
			sum, err := convert(t, Options{Input: in, Output: out, BaseModel: "Qwen/Qwen3.5-35B-A3B", ExpertOutput: ex, NonexpertOutput: nx,
				Progress: func(p Progress) { last = p }})
			if err != nil {
				t.Fatal(err)
			}
			merged := load(t, filepath.Join(out, peft.ModelFile))
			expert := load(t, filepath.Join(ex, peft.ModelFile))
			nonexpert := load(t, filepath.Join(nx, peft.ModelFile))
			fused := load(t, filepath.Join(in, ktlora.FusedFile))
			orig := load(t, filepath.Join(in, peft.ModelFile))

			nExpert := spec.Layers * spec.Experts * 6
			if len(expert.tensors) != nExpert || len(nonexpert.tensors) != len(orig.tensors) || len(merged.tensors) != nExpert+len(orig.tensors) {
				t.Fatalf("tensor counts merged %d expert %d nonexpert %d; want %d, %d, %d",
					len(merged.tensors), len(expert.tensors), len(nonexpert.tensors), nExpert+len(orig.tensors), nExpert, len(orig.tensors))
			}
			if sum.TensorCount != len(merged.tensors) || sum.Rank != int64(spec.Rank) || sum.Experts != int64(spec.Experts) || len(sum.Layers) != spec.Layers {
				t.Errorf("summary %+v", sum)
			}
			if last.DoneTensors != last.TotalTensors || last.DoneBytes != last.TotalBytes || last.TotalTensors != 2*len(merged.tensors) {
				t.Errorf("final progress %+v", last)
			}
			for _, l := range []loaded{merged, expert, nonexpert} {
				if !reflect.DeepEqual(l.meta, map[string]string{"format": "pt"}) {
					t.Errorf("metadata %v, want format=pt", l.meta)
				}
			}
			// Merged = expert ∪ nonexpert, disjoint, identical tensors.
			for name, mt := range merged.tensors {
				et, inE := expert.tensors[name]
				nt, inN := nonexpert.tensors[name]
				if inE == inN {
					t.Fatalf("%s: in expert split %v, in non-expert split %v; want exactly one", name, inE, inN)
				}
				st := et
				if inN {
					st = nt
				}
				if st.DType != mt.DType || !reflect.DeepEqual(st.Shape, mt.Shape) || !bytes.Equal(st.Data, mt.Data) {
					t.Fatalf("%s: split %s %v differs from merged %s %v", name, st.DType, st.Shape, mt.DType, mt.Shape)
				}
				if peft.IsExpertKey(name) != inE {
					t.Errorf("%s: SGLang's split rule says expert=%v, converter put it in expert split=%v", name, peft.IsExpertKey(name), inE)
				}
			}
			// Expert tensors are slices of the fused stacks.
			for l := 0; l < spec.Layers; l++ {
				for _, k := range ktlora.Kinds {
					f := fused.tensors[ktlora.FusedKey(l, k)]
					per := len(f.Data) / spec.Experts
					for e := 0; e < spec.Experts; e++ {
						mt, ok := merged.tensors[ktlora.ExpertKey(l, e, k)]
						if !ok {
							t.Fatalf("missing %s", ktlora.ExpertKey(l, e, k))
						}
						if !reflect.DeepEqual(mt.Shape, f.Shape[1:]) || mt.DType != spec.DType || !bytes.Equal(mt.Data, f.Data[e*per:(e+1)*per]) {
							t.Fatalf("%s is not expert %d of %s", ktlora.ExpertKey(l, e, k), e, ktlora.FusedKey(l, k))
						}
					}
				}
			}
			// Non-expert tensors are the input's, under cleaned keys.
			for name, ot := range orig.tensors {
				mt, ok := merged.tensors[peft.CleanKey(name)]
				if !ok || !bytes.Equal(mt.Data, ot.Data) || !reflect.DeepEqual(mt.Shape, ot.Shape) {
					t.Fatalf("non-expert %s not carried over as %s", name, peft.CleanKey(name))
				}
				if strings.HasPrefix(peft.CleanKey(name), "base_model") {
					t.Fatalf("key %s kept its PEFT prefix", peft.CleanKey(name))
				}
			}
			for _, f := range []struct{ dir, golden string }{{out, "merged"}, {ex, "expert"}, {nx, "nonexpert"}} {
				if got := listDir(t, f.dir); !reflect.DeepEqual(got, []string{MarkerFile, peft.ConfigFile, peft.ModelFile}) {
					t.Errorf("%s holds %v", f.dir, got)
				}
				cfg, err := os.ReadFile(filepath.Join(f.dir, peft.ConfigFile))
				if err != nil {
					t.Fatal(err)
				}
				checkGolden(t, filepath.Join("golden", tc.name, f.golden+"_adapter_config.json"), cfg)
			}
			if got := listDir(t, root); !reflect.DeepEqual(got, []string{"expert", "merged", "nonexpert"}) {
				t.Errorf("output parent holds %v; want only the three outputs (no staging leftovers)", got)
			}
		})
	}
}

// refWrite writes the reference converter's own test input: layer 2, two
// experts, hidden 5, intermediate 7, rank 3, F32 counters.
func refWrite(t *testing.T, dir string, rank int64) {
	t.Helper()
	e, h, i := int64(2), int64(5), int64(7)
	specs := map[string][]int64{}
	for _, k := range ktlora.Kinds {
		specs[ktlora.FusedKey(2, k)] = k.Shape(e, rank, h, i)
	}
	writeST(t, filepath.Join(dir, ktlora.FusedFile), specs, tensor.F32)
}

// The reference converter's unit tests, re-stated.
func TestReferenceBehaviour(t *testing.T) {
	t.Run("shapes_keys_config", func(t *testing.T) {
		in, out := filepath.Join(t.TempDir(), "input"), filepath.Join(t.TempDir(), "output")
		refWrite(t, in, 3)
		sum, err := convert(t, Options{Input: in, Output: out, BaseModel: "/models/base", LoraAlpha: f64(16)})
		if err != nil {
			t.Fatal(err)
		}
		if sum.TensorCount != 12 || sum.Rank != 3 || !reflect.DeepEqual(sum.TargetModules, []string{"gate_proj", "up_proj", "down_proj"}) {
			t.Errorf("summary %+v", sum)
		}
		m := load(t, filepath.Join(out, peft.ModelFile))
		if s := m.tensors["model.layers.2.mlp.experts.1.gate_proj.lora_A.weight"].Shape; !reflect.DeepEqual(s, []int64{3, 5}) {
			t.Errorf("gate A shape %v", s)
		}
		if s := m.tensors["model.layers.2.mlp.experts.0.down_proj.lora_B.weight"].Shape; !reflect.DeepEqual(s, []int64{5, 3}) {
			t.Errorf("down B shape %v", s)
		}
		cfg, _ := os.ReadFile(filepath.Join(out, peft.ConfigFile))
		checkGolden(t, "golden/reference_no_input_config.json", cfg)
	})
	t.Run("existing_adapter_and_alpha", func(t *testing.T) {
		in, out := filepath.Join(t.TempDir(), "input"), filepath.Join(t.TempDir(), "output")
		refWrite(t, in, 3)
		writeST(t, filepath.Join(in, peft.ModelFile), map[string][]int64{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {3, 5}}, tensor.F32)
		os.WriteFile(filepath.Join(in, peft.ConfigFile), []byte(`{"peft_type": "LORA", "r": 3, "lora_alpha": 9, "target_modules": ["q_proj"],
			"bias": "none", "task_type": "CAUSAL_LM", "base_model_name_or_path": "old-base", "modules_to_save": null, "rank_pattern": {}}`), 0o644)
		var warnings []string
		sum, err := convert(t, Options{Input: in, Output: out, BaseModel: "/models/base", LoraAlpha: f64(16), Warn: func(s string) { warnings = append(warnings, s) }})
		if err != nil {
			t.Fatal(err)
		}
		if sum.LoraAlpha.(interface{ String() string }).String() != "9" {
			t.Errorf("lora_alpha %v, want the input config's 9", sum.LoraAlpha)
		}
		if want := []string{"q_proj", "gate_proj", "up_proj", "down_proj"}; !reflect.DeepEqual(sum.TargetModules, want) {
			t.Errorf("target_modules %v, want %v", sum.TargetModules, want)
		}
		if len(warnings) == 0 || !strings.Contains(strings.Join(warnings, "\n"), "--lora-alpha 16 ignored") {
			t.Errorf("no warning that --lora-alpha was ignored: %q", warnings)
		}
		m := load(t, filepath.Join(out, peft.ModelFile))
		if _, ok := m.tensors["model.layers.0.self_attn.q_proj.lora_A.weight"]; !ok {
			t.Errorf("cleaned key missing: %v", m.names())
		}
		cfg, _ := os.ReadFile(filepath.Join(out, peft.ConfigFile))
		checkGolden(t, "golden/reference_with_input_config.json", cfg)
	})
	t.Run("split_target_modules", func(t *testing.T) {
		root := t.TempDir()
		in := filepath.Join(root, "input")
		refWrite(t, in, 3)
		writeST(t, filepath.Join(in, peft.ModelFile), map[string][]int64{
			"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {3, 5},
			"base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight": {5, 3},
		}, tensor.F32)
		os.WriteFile(filepath.Join(in, peft.ConfigFile), []byte(`{"r": 3, "lora_alpha": 9, "target_modules": ["q_proj", "o_proj", "lm_head"]}`), 0o644)
		sum, err := convert(t, Options{Input: in, Output: filepath.Join(root, "output"), BaseModel: "/models/base",
			ExpertOutput: filepath.Join(root, "expert"), NonexpertOutput: filepath.Join(root, "nonexpert")})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{}
		for _, w := range sum.Outputs {
			got[w.Role] = w.TargetModules
		}
		want := map[string][]string{
			"merged":    {"q_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"},
			"expert":    {"gate_proj", "up_proj", "down_proj"},
			"nonexpert": {"q_proj", "o_proj"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("target modules %v, want %v", got, want)
		}
	})
}

// TestOverwriteReplaces: --overwrite replaces an output an earlier run
// wrote (it holds MarkerFile), whatever was added to it since.
func TestOverwriteReplaces(t *testing.T) {
	in := synth(t, smallSpec())
	out := filepath.Join(t.TempDir(), "out")
	if _, err := convert(t, Options{Input: in, Output: out, BaseModel: "b"}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(out, "existing.txt"), []byte("old"), 0o644)
	if _, err := convert(t, Options{Input: in, Output: out, BaseModel: "b", Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, out); !reflect.DeepEqual(got, []string{MarkerFile, peft.ConfigFile, peft.ModelFile}) {
		t.Errorf("after --overwrite OUT holds %v", got)
	}
	for _, f := range []string{MarkerFile, peft.ConfigFile, peft.ModelFile} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want 0644", f, fi.Mode(), err)
		}
	}
	if got := listDir(t, filepath.Dir(out)); !reflect.DeepEqual(got, []string{"out"}) {
		t.Errorf("leftovers next to OUT: %v", got)
	}
	// An existing empty directory needs no --overwrite.
	out2 := filepath.Join(t.TempDir(), "empty")
	os.MkdirAll(out2, 0o755)
	if _, err := convert(t, Options{Input: in, Output: out2, BaseModel: "b"}); err != nil {
		t.Fatal(err)
	}
}

// TestFailedRunLeavesNothing interrupts conversions at several points and
// checks that no output (and no staging directory) is left, and that an
// existing output being overwritten survives intact.
func TestFailedRunLeavesNothing(t *testing.T) {
	in := synth(t, smallSpec())
	for _, stopAfter := range []int{1, 100, 316, 317, 600, 632} {
		root := t.TempDir()
		out := filepath.Join(root, "out")
		os.MkdirAll(out, 0o755)
		os.WriteFile(filepath.Join(out, MarkerFile), []byte(markerText), 0o644)
		os.WriteFile(filepath.Join(out, "keep.txt"), []byte("precious"), 0o644)
		ctx, cancel := context.WithCancel(context.Background())
		_, err := Convert(ctx, Options{Input: in, Output: out, BaseModel: "b", Overwrite: true,
			ExpertOutput: filepath.Join(root, "ex"), NonexpertOutput: filepath.Join(root, "nx"),
			Progress: func(p Progress) {
				if p.DoneTensors == stopAfter {
					cancel()
				}
			}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stop after %d: err %v, want context.Canceled", stopAfter, err)
		}
		if got := listDir(t, root); !reflect.DeepEqual(got, []string{"out"}) {
			t.Errorf("stop after %d: %s holds %v, want only the untouched out", stopAfter, root, got)
		}
		if got := listDir(t, out); !reflect.DeepEqual(got, []string{MarkerFile, "keep.txt"}) {
			t.Errorf("stop after %d: out holds %v", stopAfter, got)
		}
	}
	// A failure preparing a later output (its parent is a file) after the
	// merged one was staged.
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "file"), nil, 0o644)
	_, err := convert(t, Options{Input: in, Output: filepath.Join(root, "out"), BaseModel: "b",
		ExpertOutput: filepath.Join(root, "file", "ex")})
	if err == nil {
		t.Fatal("expected an error for an expert output below a file")
	}
	if got := listDir(t, root); !reflect.DeepEqual(got, []string{"file"}) {
		t.Errorf("after a failed run %s holds %v", root, got)
	}
}
