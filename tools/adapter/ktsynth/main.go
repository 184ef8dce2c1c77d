// Command ktsynth writes a synthetic KT SFT output directory (what
// LLaMA-Factory + KTransformers training leaves: adapter_model.safetensors,
// fused_expert_lora.safetensors, adapter_config.json) with Qwen3.5 MoE shapes,
// as input for kt convert-adapter.
//
//	go run ./tools/adapter/ktsynth -preset tiny -out DIR            # matches testdata/models/qwen35moe-b
//	go run ./tools/adapter/ktsynth -preset qwen35-a3b -layers 2 -out DIR
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ktserve/kt/adapter/ktsynth"
	"github.com/ktserve/kt/tensor"
)

func main() {
	var (
		out     = flag.String("out", "", "output directory (required)")
		preset  = flag.String("preset", "tiny", "widths: tiny (testdata/models/qwen35moe-b) or qwen35-a3b (Qwen3.5-35B-A3B)")
		layers  = flag.Int("layers", 0, "number of layers (default: the preset's; qwen35-a3b has 40, ~1.3 GB of expert LoRA in bf16)")
		experts = flag.Int("experts", 0, "routed experts per layer (default: the preset's)")
		rank    = flag.Int("rank", 8, "LoRA rank")
		alpha   = flag.Float64("alpha", 16, "lora_alpha written to adapter_config.json")
		dtype   = flag.String("dtype", "BF16", "BF16 or F32")
		seed    = flag.Uint64("seed", 1, "random seed")
		scale   = flag.Float64("scale", 1, "values are uniform in [-0.5, 0.5) times scale")
		prefix  = flag.String("key-prefix", "base_model.model.model.", "prefix of non-expert keys as PEFT saved them")
		noNon   = flag.Bool("no-nonexpert", false, "omit adapter_model.safetensors")
		noCfg   = flag.Bool("no-config", false, "omit adapter_config.json")
	)
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "ktsynth: -out is required")
		os.Exit(2)
	}
	var d ktsynth.Dims
	switch *preset {
	case "tiny":
		d = ktsynth.TinyQwen35()
	case "qwen35-a3b":
		d = ktsynth.Qwen35A3B(40, 256)
	default:
		fmt.Fprintf(os.Stderr, "ktsynth: unknown preset %q\n", *preset)
		os.Exit(2)
	}
	if *layers > 0 {
		d.Layers = *layers
	}
	if *experts > 0 {
		d.Experts = *experts
	}
	dt, err := tensor.ParseDType(*dtype)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ktsynth:", err)
		os.Exit(2)
	}
	s := ktsynth.Spec{Dims: d, Rank: *rank, Alpha: *alpha, DType: dt, Seed: *seed, Scale: *scale, KeyPrefix: *prefix, NoNonexpert: *noNon, NoConfig: *noCfg}
	if err := ktsynth.Write(*out, s); err != nil {
		fmt.Fprintln(os.Stderr, "ktsynth:", err)
		os.Exit(1)
	}
}
