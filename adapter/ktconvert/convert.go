// Package ktconvert converts the output of KTransformers SFT (a PEFT
// adapter for the non-expert modules plus fused_expert_lora.safetensors with
// the routed experts' LoRA as [E, ., .] stacks) into one merged PEFT adapter
// directory that SGLang-KT (and kt serve) accept through --lora-paths. It
// follows the contract of KTransformers' convert_kt_to_sglang_adapter.py:
// the same tensor names, shapes, dtypes and adapter_config.json fields, the
// same refusals, plus checks against the base model's config.json. Tensors
// are streamed from the memory-mapped inputs to the outputs, which appear
// atomically: a failed or interrupted run leaves no partial output.
package ktconvert

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/safetensors"
)

// Options are the converter's inputs, named after the reference script's
// arguments.
type Options struct {
	// Input is the KT SFT output directory (IN).
	Input string
	// Output is the merged adapter directory to write (OUT).
	Output string
	// BaseModel is written to adapter_config.json base_model_name_or_path.
	// When it names a local directory, its config.json is checked against
	// the adapter.
	BaseModel string
	// LoraAlpha is used when the input has no adapter_config.json with a
	// lora_alpha field; nil when not given.
	LoraAlpha *float64
	// Overwrite allows replacing non-empty output directories that an
	// earlier conversion wrote (they hold MarkerFile).
	Overwrite bool
	// ExpertOutput and NonexpertOutput, when not empty, also receive the
	// expert-only and non-expert-only halves of the merged adapter.
	ExpertOutput, NonexpertOutput string
	// Progress, when set, is called as tensor data is written.
	Progress func(Progress)
	// Warn, when set, receives non-fatal notices.
	Warn func(string)
}

// Progress reports how far the write has got, over all outputs together.
type Progress struct {
	Output       string // directory being written
	Tensor       string // tensor just written
	DoneBytes    int64
	TotalBytes   int64
	DoneTensors  int
	TotalTensors int
}

// Written describes one written adapter directory.
type Written struct {
	Role          string // "merged", "expert" or "nonexpert"
	Dir           string
	TensorCount   int
	Bytes         int64
	TargetModules []string
}

// Summary describes a finished conversion.
type Summary struct {
	Input         string
	Output        string
	TensorCount   int
	Rank          int64
	LoraAlpha     any // as written to adapter_config.json
	TargetModules []string
	Experts       int64
	Layers        []int
	BaseChecked   bool // the base model's config.json was checked
	Outputs       []Written
}

// Convert runs the conversion. Cancelling ctx stops it between tensors and
// removes everything written so far.
func Convert(ctx context.Context, o Options) (*Summary, error) {
	warn := o.Warn
	if warn == nil {
		warn = func(string) {}
	}
	if o.BaseModel == "" {
		return nil, errors.New("--base-model-name-or-path is required")
	}
	in, err := resolvePath(o.Input)
	if err != nil {
		return nil, fmt.Errorf("input directory: %w", err)
	}
	if fi, err := os.Stat(in); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("input directory not found: %s", in)
	}
	outs := []output{{role: "output", path: o.Output}}
	if o.ExpertOutput != "" {
		outs = append(outs, output{role: "expert output", path: o.ExpertOutput})
	}
	if o.NonexpertOutput != "" {
		outs = append(outs, output{role: "non-expert output", path: o.NonexpertOutput})
	}
	for i := range outs {
		if outs[i].path, err = resolvePath(outs[i].path); err != nil {
			return nil, fmt.Errorf("%s directory: %w", outs[i].role, err)
		}
	}
	guarded, err := guardedDirs(o.BaseModel)
	if err != nil {
		return nil, err
	}
	if err := checkOutputs(in, outs, guarded, o.Overwrite); err != nil {
		return nil, err
	}

	// Plan from the headers.
	p := &plan{nonexpertTargets: map[string]bool{}, expertTargets: map[string]bool{}, nonexpertLayers: map[int]string{}}
	seen := map[string]string{}
	adapterPath := filepath.Join(in, peft.ModelFile)
	var files []*safetensors.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if _, err := os.Stat(adapterPath); err == nil {
		f, err := safetensors.Open(adapterPath)
		if err != nil {
			return nil, fmt.Errorf("non-expert adapter: %w", err)
		}
		files = append(files, f)
		if err := p.addNonexpert(f, seen); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("non-expert adapter: %w", err)
	}
	fusedPath := filepath.Join(in, ktlora.FusedFile)
	if _, err := os.Stat(fusedPath); err != nil {
		return nil, fmt.Errorf("missing %s: %s", ktlora.FusedFile, fusedPath)
	}
	ff, err := safetensors.Open(fusedPath)
	if err != nil {
		return nil, fmt.Errorf("fused expert LoRA: %w", err)
	}
	files = append(files, ff)
	if err := p.addFused(ff, seen); err != nil {
		return nil, err
	}
	if err := p.checkNonexpertRanks(adapterPath); err != nil {
		return nil, err
	}
	if o.NonexpertOutput != "" && len(p.nonexpert) == 0 {
		return nil, fmt.Errorf("cannot write non-expert adapter %s: no non-expert tensors (%s missing or empty in %s)", outs[len(outs)-1].path, peft.ModelFile, in)
	}

	// Check against the base model.
	bm, local, err := loadBaseModel(o.BaseModel)
	if err != nil {
		return nil, err
	}
	if local {
		if err := p.checkBase(bm); err != nil {
			return nil, err
		}
	} else {
		warn(fmt.Sprintf("base model %q is not a local directory: layer, expert and size checks skipped", o.BaseModel))
	}

	// Configs.
	inCfg := peft.NewConfig()
	cfgPath := filepath.Join(in, peft.ConfigFile)
	if _, err := os.Stat(cfgPath); err == nil {
		if inCfg, err = peft.ReadConfig(cfgPath); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	alpha, err := chooseAlpha(inCfg, o.LoraAlpha, in, cfgPath, warn)
	if err != nil {
		return nil, err
	}
	if r, ok := inCfg.Int("r"); ok && r != p.rank {
		warn(fmt.Sprintf("%s has r=%d but the LoRA tensors have rank %d; writing r=%d", cfgPath, r, p.rank, p.rank))
	}
	build := func(targets map[string]bool, withInputTargets bool) *peft.Config {
		c := inCfg.Clone()
		t := make(map[string]bool, len(targets))
		for m := range targets {
			t[m] = true
		}
		if withInputTargets {
			names, _ := inCfg.TargetModules()
			for _, n := range names {
				t[n] = true
			}
		}
		c.SetDefault("peft_type", "LORA")
		c.Set("r", p.rank)
		c.Set("lora_alpha", alpha)
		c.Set("target_modules", peft.OrderTargetModules(t))
		c.SetDefault("bias", "none")
		c.SetDefault("task_type", "CAUSAL_LM")
		c.Set("base_model_name_or_path", o.BaseModel)
		return c
	}
	all := map[string]bool{}
	for m := range p.nonexpertTargets {
		all[m] = true
	}
	for m := range p.expertTargets {
		all[m] = true
	}
	jobs := []job{{out: outs[0], name: "merged", cfg: build(all, true), tensors: append(append([]outTensor(nil), p.nonexpert...), p.expert...)}}
	for _, ot := range outs[1:] {
		if ot.role == "expert output" {
			jobs = append(jobs, job{out: ot, name: "expert", cfg: build(p.expertTargets, false), tensors: p.expert})
		} else {
			jobs = append(jobs, job{out: ot, name: "nonexpert", cfg: build(p.nonexpertTargets, false), tensors: p.nonexpert})
		}
	}

	for i := range jobs {
		if jobs[i].cfgJSON, err = jobs[i].cfg.Marshal(); err != nil {
			return nil, fmt.Errorf("%s: cannot rewrite: %w", cfgPath, err)
		}
	}
	written, err := writeAll(ctx, jobs, o.Progress)
	if err != nil {
		return nil, err
	}
	tm, _ := jobs[0].cfg.Get("target_modules")
	return &Summary{
		Input: in, Output: outs[0].path,
		TensorCount: len(jobs[0].tensors), Rank: p.rank, LoraAlpha: alpha,
		TargetModules: tm.([]string), Experts: p.experts, Layers: p.layers,
		BaseChecked: local, Outputs: written,
	}, nil
}

// chooseAlpha picks lora_alpha as the reference converter does: the input
// adapter_config.json's value if the field is present, else --lora-alpha,
// else an error.
func chooseAlpha(cfg *peft.Config, flag *float64, in, cfgPath string, warn func(string)) (any, error) {
	if v, ok := cfg.Get("lora_alpha"); ok {
		if flag != nil {
			warn(fmt.Sprintf("--lora-alpha %v ignored: %s sets lora_alpha", *flag, cfgPath))
		}
		return v, nil
	}
	if flag == nil {
		return nil, fmt.Errorf("no %s with lora_alpha found in %s; pass --lora-alpha to preserve runtime scaling", peft.ConfigFile, in)
	}
	if math.IsNaN(*flag) || math.IsInf(*flag, 0) {
		return nil, fmt.Errorf("--lora-alpha %v: want a finite number", *flag)
	}
	return peft.Float(*flag), nil
}
