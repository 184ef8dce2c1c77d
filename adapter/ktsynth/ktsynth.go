// Package ktsynth writes synthetic KT SFT output directories — what
// LLaMA-Factory + KTransformers training leaves behind: adapter_model.safetensors
// (PEFT LoRA for attention, linear attention and shared-expert modules),
// fused_expert_lora.safetensors (routed-expert LoRA as [E, ., .] stacks) and
// adapter_config.json — with Qwen3.5 MoE module shapes and deterministic
// pseudo-random values. Tests and tools/adapter use it to exercise
// kt convert-adapter without a real fine-tune.
package ktsynth

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// Dims are the Qwen3.5 MoE widths that fix the adapter's tensor shapes.
type Dims struct {
	Layers, Hidden, Experts, Inter, SharedInter int
	// Full attention: q_proj writes 2*Heads*HeadDim (query + gate).
	Heads, KVHeads, HeadDim int
	// Gated DeltaNet (linear attention).
	LinKeyHeads, LinValueHeads, LinKeyDim, LinValueDim int
	// FullAttentionInterval: layer l is full attention when (l+1)%interval == 0.
	FullAttentionInterval int
}

// Qwen35A3B returns Qwen3.5-35B-A3B's widths with the given number of layers
// (the real model has 40) and routed experts (the real model has 256).
func Qwen35A3B(layers, experts int) Dims {
	return Dims{
		Layers: layers, Hidden: 2048, Experts: experts, Inter: 512, SharedInter: 512,
		Heads: 16, KVHeads: 2, HeadDim: 256,
		LinKeyHeads: 16, LinValueHeads: 32, LinKeyDim: 128, LinValueDim: 128,
		FullAttentionInterval: 4,
	}
}

// TinyQwen35 returns the widths of testdata/models/qwen35moe-b, the tiny
// random transformers Qwen3_5MoeForCausalLM (5 layers, hidden 64, 8 experts,
// moe_intermediate 32, layer types linear, full, linear, linear, full).
func TinyQwen35() Dims {
	return Dims{
		Layers: 5, Hidden: 64, Experts: 8, Inter: 32, SharedInter: 48,
		Heads: 8, KVHeads: 2, HeadDim: 64,
		LinKeyHeads: 4, LinValueHeads: 8, LinKeyDim: 16, LinValueDim: 16,
		FullAttentionInterval: 0, // explicit: see FullAttention
	}
}

// FullAttention reports whether layer l uses full (gated) attention.
func (d Dims) FullAttention(l int) bool {
	if d.FullAttentionInterval == 0 { // qwen35moe-b's explicit layer_types
		return l == 1 || l == 4
	}
	return (l+1)%d.FullAttentionInterval == 0
}

// Spec says what to write.
type Spec struct {
	Dims
	Rank  int
	Alpha float64
	DType tensor.DType // BF16 or F32
	Seed  uint64
	// KeyPrefix is prepended to non-expert keys as PEFT saves them, e.g.
	// "base_model.model.model." (CausalLM) or
	// "base_model.model.model.language_model." (Qwen3.5 with vision tower).
	KeyPrefix string
	// Scale multiplies the values, which are uniform in [-0.5, 0.5) when
	// Scale is 0 or 1.
	Scale float64
	// NoNonexpert skips adapter_model.safetensors; NoConfig skips
	// adapter_config.json (the converter then needs --lora-alpha).
	NoNonexpert, NoConfig bool
}

// Default returns a Spec for d at rank 8, alpha 16, bf16, CausalLM keys.
func Default(d Dims) Spec {
	return Spec{Dims: d, Rank: 8, Alpha: 16, DType: tensor.BF16, Seed: 1, KeyPrefix: "base_model.model.model."}
}

// Module is one non-expert LoRA target: its path below the model prefix and
// its input and output widths.
type Module struct {
	Path    string // e.g. "layers.3.self_attn.q_proj"
	In, Out int
}

// Modules lists the non-expert LoRA targets of every layer: q/k/v/o_proj on
// full-attention layers, in_proj_qkv/z/b/a and out_proj on linear-attention
// layers, and the shared expert's gate/up/down_proj on all layers.
func (d Dims) Modules() []Module {
	var ms []Module
	for l := 0; l < d.Layers; l++ {
		p := "layers." + strconv.Itoa(l) + "."
		if d.FullAttention(l) {
			ms = append(ms,
				Module{p + "self_attn.q_proj", d.Hidden, 2 * d.Heads * d.HeadDim},
				Module{p + "self_attn.k_proj", d.Hidden, d.KVHeads * d.HeadDim},
				Module{p + "self_attn.v_proj", d.Hidden, d.KVHeads * d.HeadDim},
				Module{p + "self_attn.o_proj", d.Heads * d.HeadDim, d.Hidden})
		} else {
			key, val := d.LinKeyHeads*d.LinKeyDim, d.LinValueHeads*d.LinValueDim
			ms = append(ms,
				Module{p + "linear_attn.in_proj_qkv", d.Hidden, 2*key + val},
				Module{p + "linear_attn.in_proj_z", d.Hidden, val},
				Module{p + "linear_attn.in_proj_b", d.Hidden, d.LinValueHeads},
				Module{p + "linear_attn.in_proj_a", d.Hidden, d.LinValueHeads},
				Module{p + "linear_attn.out_proj", val, d.Hidden})
		}
		ms = append(ms,
			Module{p + "mlp.shared_expert.gate_proj", d.Hidden, d.SharedInter},
			Module{p + "mlp.shared_expert.up_proj", d.Hidden, d.SharedInter},
			Module{p + "mlp.shared_expert.down_proj", d.SharedInter, d.Hidden})
	}
	return ms
}

// Write creates dir (which must not exist or be empty) and writes the
// synthetic KT SFT output into it.
func Write(dir string, s Spec) error {
	if s.DType != tensor.BF16 && s.DType != tensor.F32 {
		return fmt.Errorf("ktsynth: dtype %s: want BF16 or F32", s.DType)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rng := splitmix(s.Seed)
	r, e, h, in := int64(s.Rank), int64(s.Experts), int64(s.Hidden), int64(s.Inter)

	// fused_expert_lora.safetensors, written in key order one tensor at a time.
	var specs []safetensors.Spec
	for l := 0; l < s.Layers; l++ {
		for _, k := range ktlora.Kinds {
			specs = append(specs, safetensors.Spec{Name: ktlora.FusedKey(l, k), DType: s.DType, Shape: k.Shape(e, r, h, in)})
		}
	}
	scale := s.Scale
	if scale == 0 {
		scale = 1
	}
	if err := writeRandom(filepath.Join(dir, ktlora.FusedFile), specs, nil, &rng, scale); err != nil {
		return err
	}

	var targets []string
	if !s.NoNonexpert {
		specs = specs[:0]
		seen := map[string]bool{}
		for _, m := range s.Modules() {
			base := s.KeyPrefix + m.Path
			specs = append(specs,
				safetensors.Spec{Name: base + ".lora_A.weight", DType: s.DType, Shape: []int64{r, int64(m.In)}},
				safetensors.Spec{Name: base + ".lora_B.weight", DType: s.DType, Shape: []int64{int64(m.Out), r}})
			if t := peft.LastComponent(m.Path); !seen[t] {
				seen[t] = true
				targets = append(targets, t)
			}
		}
		if err := writeRandom(filepath.Join(dir, peft.ModelFile), specs, map[string]string{"format": "pt"}, &rng, scale); err != nil {
			return err
		}
	}
	if !s.NoConfig {
		c := peft.NewConfig()
		c.Set("peft_type", "LORA")
		c.Set("task_type", "CAUSAL_LM")
		c.Set("r", s.Rank)
		c.Set("lora_alpha", s.Alpha)
		c.Set("lora_dropout", 0.0)
		c.Set("bias", "none")
		c.Set("target_modules", targets)
		c.Set("base_model_name_or_path", "Qwen/Qwen3.5-35B-A3B")
		c.Set("inference_mode", true)
		b, err := c.Marshal()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, peft.ConfigFile), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeRandom streams pseudo-random values (uniform in [-0.5, 0.5) times
// scale) for each declared tensor, one tensor at a time.
func writeRandom(path string, specs []safetensors.Spec, meta map[string]string, rng *splitmix, scale float64) error {
	w, err := safetensors.Create(path, specs, meta)
	if err != nil {
		return err
	}
	var buf []byte
	for _, sp := range specs {
		n, err := tensor.NumElements(sp.Shape)
		if err != nil {
			w.Abort()
			return err
		}
		size := int(n) * sp.DType.Size()
		if cap(buf) < size {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		for i := int64(0); i < n; i++ {
			v := float32((rng.float() - 0.5) * scale)
			if sp.DType == tensor.BF16 {
				binary.LittleEndian.PutUint16(buf[2*i:], tensor.F32ToBF16(v))
			} else {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
			}
		}
		if err := w.WriteTensor(sp.Name, buf); err != nil {
			w.Abort()
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
}

// splitmix is the SplitMix64 generator: tiny, fast, deterministic.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (s *splitmix) float() float64 { return float64(s.next()>>11) / (1 << 53) }
