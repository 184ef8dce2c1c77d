// Package synth writes synthetic random-weight checkpoints for the model
// packages' tests and benchmarks: a config.json and a bf16 model.safetensors
// streamed tensor by tensor, so a checkpoint of any size never sits in RAM.
// Each tensor's values are drawn from a random stream seeded by the seed and
// the tensor's logical name, so per-expert and fused 3-D expert layouts of
// one seed hold the same values.
package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// Fill says what a tensor holds.
type Fill int

// Fills.
const (
	Random Fill = iota // random sign, magnitude [2^(Exp-127), 2^(Exp-126)), 7 random mantissa bits
	Zero               // 0 (a zero-centred norm weight: scale 1)
	One                // 1
	ALog               // log(U[1,16)) (Gated DeltaNet A_log)
)

// Checkpoint is the tensor list of a synthetic checkpoint.
type Checkpoint struct {
	// Exp is the bf16 exponent of Random values: |w| in [2^(Exp-127),
	// 2^(Exp-126)); 0 means 120 (about 0.01).
	Exp   int
	specs []safetensors.Spec
	fill  map[string]Fill
}

// Add appends a Random bf16 tensor.
func (c *Checkpoint) Add(name string, shape ...int64) {
	c.specs = append(c.specs, safetensors.Spec{Name: name, DType: tensor.BF16, Shape: shape})
}

// AddFilled appends a bf16 tensor holding f.
func (c *Checkpoint) AddFilled(name string, f Fill, shape ...int64) {
	c.Add(name, shape...)
	if c.fill == nil {
		c.fill = map[string]Fill{}
	}
	c.fill[name] = f
}

// AddExperts appends the routed experts under p (a layer's
// "...mlp.experts."): E experts of intermediate size I over hidden size H,
// per-expert keys as published or transformers 5's fused
// gate_up_proj [E, 2I, H] and down_proj [E, H, I].
func (c *Checkpoint) AddExperts(p string, E, I, H int64, fused bool) {
	if fused {
		c.Add(p+"gate_up_proj", E, 2*I, H)
		c.Add(p+"down_proj", E, H, I)
		return
	}
	for e := int64(0); e < E; e++ {
		q := fmt.Sprintf("%s%d.", p, e)
		c.Add(q+"gate_proj.weight", I, H)
		c.Add(q+"up_proj.weight", I, H)
		c.Add(q+"down_proj.weight", H, I)
	}
}

// WriteConfig writes cfg as dir/config.json, making dir.
func WriteConfig(dir string, cfg any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}

// Write streams the tensors to dir/model.safetensors (atomically).
func (c *Checkpoint) Write(dir string, seed uint64) error {
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), c.specs, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	exp := uint16(120)
	if c.Exp > 0 && c.Exp < 255 {
		exp = uint16(c.Exp)
	}
	buf := make([]byte, 1<<20)
	// fill writes n bytes of the logical tensor name.
	fill := func(name string, n int64) error {
		h := fnv.New64a()
		h.Write([]byte(name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		for n > 0 {
			m := min(n, int64(len(buf)))
			chunk := buf[:m]
			switch k := c.fill[name]; k {
			case Random:
				// sign, exponent, 7 random mantissa bits, four at a time
				for i := 0; i < len(chunk); i += 8 {
					r := rng.Uint64()
					for j := 0; j < 4 && i+2*j < len(chunk); j++ {
						binary.LittleEndian.PutUint16(chunk[i+2*j:], uint16(r>>(16*j))&0x807f|exp<<7)
					}
				}
			default:
				for i := 0; i < len(chunk); i += 2 {
					var v uint16
					switch k {
					case One:
						v = 0x3f80
					case ALog:
						v = tensor.F32ToBF16(float32(math.Log(1 + 15*rng.Float64())))
					}
					binary.LittleEndian.PutUint16(chunk[i:], v)
				}
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			n -= m
		}
		return nil
	}
	for _, sp := range c.specs {
		n := int64(2)
		for _, d := range sp.Shape {
			n *= d
		}
		var err error
		switch {
		case strings.HasSuffix(sp.Name, "mlp.experts.gate_up_proj"):
			// per expert: the gate rows, then the up rows, each named as
			// the per-expert layout names them
			p := strings.TrimSuffix(sp.Name, "gate_up_proj")
			part := n / sp.Shape[0] / 2
			for e := int64(0); e < sp.Shape[0] && err == nil; e++ {
				if err = fill(fmt.Sprintf("%s%d.gate_proj.weight", p, e), part); err == nil {
					err = fill(fmt.Sprintf("%s%d.up_proj.weight", p, e), part)
				}
			}
		case strings.HasSuffix(sp.Name, "mlp.experts.down_proj"):
			p := strings.TrimSuffix(sp.Name, "down_proj")
			for e := int64(0); e < sp.Shape[0] && err == nil; e++ {
				err = fill(fmt.Sprintf("%s%d.down_proj.weight", p, e), n/sp.Shape[0])
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
