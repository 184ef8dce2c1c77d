package qwen3moe

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// SynthShape sizes a synthetic random-weight Qwen3-MoE checkpoint.
type SynthShape struct {
	Layers, Hidden, Heads, KVHeads, HeadDim int
	Experts, TopK, MoEInter, Vocab          int
	Fused                                   bool // fused 3-D expert tensors instead of per-expert keys
	// Exp is the magnitude of the random weights: |w| in [2^(Exp-127),
	// 2^(Exp-126)); 0 means 120 (about 0.01).
	Exp int
}

// Qwen3_30B_A3B is the shape of Qwen/Qwen3-30B-A3B (48 layers).
var Qwen3_30B_A3B = SynthShape{Layers: 48, Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128,
	Experts: 128, TopK: 8, MoEInter: 768, Vocab: 151936}

// WriteSynthetic writes config.json and model.safetensors of a Qwen3-MoE
// model with random bf16 weights (magnitude set by s.Exp, random sign;
// norms 1) to dir. It streams, so the checkpoint never sits in RAM.
func WriteSynthetic(dir string, s SynthShape, seed uint64) error {
	cfg := map[string]any{
		"architectures": []string{Architecture}, "model_type": "qwen3_moe",
		"vocab_size": s.Vocab, "hidden_size": s.Hidden, "intermediate_size": 6144,
		"moe_intermediate_size": s.MoEInter, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"num_experts": s.Experts, "num_experts_per_tok": s.TopK, "norm_topk_prob": true,
		"decoder_sparse_step": 1, "mlp_only_layers": []int{}, "rms_norm_eps": 1e-6,
		"rope_theta": 1e6, "max_position_embeddings": 40960, "tie_word_embeddings": false,
		"hidden_act": "silu", "eos_token_id": 151645, "bos_token_id": 151643, "torch_dtype": "bfloat16",
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		return err
	}
	var specs []safetensors.Spec
	norms := map[string]bool{}
	add := func(name string, shape ...int64) {
		specs = append(specs, safetensors.Spec{Name: name, DType: tensor.BF16, Shape: shape})
	}
	norm := func(name string, n int64) { add(name, n); norms[name] = true }
	H, hd, E, I := int64(s.Hidden), int64(s.HeadDim), int64(s.Experts), int64(s.MoEInter)
	add("model.embed_tokens.weight", int64(s.Vocab), H)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		norm(p+"input_layernorm.weight", H)
		norm(p+"post_attention_layernorm.weight", H)
		add(p+"self_attn.q_proj.weight", int64(s.Heads)*hd, H)
		add(p+"self_attn.k_proj.weight", int64(s.KVHeads)*hd, H)
		add(p+"self_attn.v_proj.weight", int64(s.KVHeads)*hd, H)
		add(p+"self_attn.o_proj.weight", H, int64(s.Heads)*hd)
		norm(p+"self_attn.q_norm.weight", hd)
		norm(p+"self_attn.k_norm.weight", hd)
		add(p+"mlp.gate.weight", E, H)
		if s.Fused {
			add(p+"mlp.experts.gate_up_proj", E, 2*I, H)
			add(p+"mlp.experts.down_proj", E, H, I)
			continue
		}
		for e := 0; e < s.Experts; e++ {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			add(q+"gate_proj.weight", I, H)
			add(q+"up_proj.weight", I, H)
			add(q+"down_proj.weight", H, I)
		}
	}
	norm("model.norm.weight", H)
	add("lm_head.weight", int64(s.Vocab), H)
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	exp := uint16(120)
	if s.Exp > 0 && s.Exp < 255 {
		exp = uint16(s.Exp)
	}
	buf := make([]byte, 1<<20)
	// fill writes n bytes of the logical tensor name, seeded by its name so
	// both expert layouts hold the same values.
	fill := func(name string, n int64) error {
		h := fnv.New64a()
		h.Write([]byte(name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		for n > 0 {
			m := min(n, int64(len(buf)))
			chunk := buf[:m]
			if norms[name] {
				for i := 0; i < len(chunk); i += 2 {
					binary.LittleEndian.PutUint16(chunk[i:], 0x3f80) // 1.0
				}
			} else {
				for i := 0; i < len(chunk); i += 8 {
					r := rng.Uint64()
					// sign, exponent 2^-7, 7 random mantissa bits, four at a time
					for j := 0; j < 4 && i+2*j < len(chunk); j++ {
						v := uint16(r>>(16*j)) & 0x807f
						binary.LittleEndian.PutUint16(chunk[i+2*j:], v|exp<<7)
					}
				}
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			n -= m
		}
		return nil
	}
	for _, sp := range specs {
		n := int64(2)
		for _, d := range sp.Shape {
			n *= d
		}
		var err error
		switch {
		case strings.HasSuffix(sp.Name, "mlp.experts.gate_up_proj"):
			p := strings.TrimSuffix(sp.Name, "gate_up_proj")
			for e := 0; e < s.Experts && err == nil; e++ {
				if err = fill(fmt.Sprintf("%s%d.gate_proj.weight", p, e), 2*I*H); err == nil {
					err = fill(fmt.Sprintf("%s%d.up_proj.weight", p, e), 2*I*H)
				}
			}
		case strings.HasSuffix(sp.Name, "mlp.experts.down_proj"):
			p := strings.TrimSuffix(sp.Name, "down_proj")
			for e := 0; e < s.Experts && err == nil; e++ {
				err = fill(fmt.Sprintf("%s%d.down_proj.weight", p, e), 2*I*H)
			}
		default:
			err = fill(sp.Name, n)
		}
		if err != nil {
			w.Abort()
			return err
		}
	}
	return w.Close()
}
