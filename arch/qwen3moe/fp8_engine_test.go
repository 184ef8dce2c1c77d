//go:build linux && amd64 && cgo

package qwen3moe

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

// TestFP8CheckpointCPUExperts serves an FP8 copy of a synthetic Qwen3-MoE
// model (hidden 128, experts of 128) with its routed experts on the CPU
// expert engine (modeltest.FP8CheckpointCPUExperts).
func TestFP8CheckpointCPUExperts(t *testing.T) {
	src := t.TempDir()
	shape := SynthShape{Layers: 2, Hidden: 128, Heads: 2, KVHeads: 1, HeadDim: 64, Experts: 4, TopK: 2, MoEInter: 128, Vocab: 256, Exp: 123}
	if err := WriteSynthetic(src, shape, 5); err != nil {
		t.Fatal(err)
	}
	prompt := []int32{3, 17, 99, 4, 250, 31, 8, 77, 120, 5, 61, 200}
	modeltest.FP8CheckpointCPUExperts(t, src, prompt, func(dir string, o arch.Options) (modeltest.Runner, error) {
		r, err := Load(dir, o)
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
