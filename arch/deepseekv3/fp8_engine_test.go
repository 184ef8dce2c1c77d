//go:build linux && amd64 && cgo

package deepseekv3

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

// TestFP8CheckpointCPUExperts serves an FP8 copy (128 x 128 blocks, as the
// official checkpoints) of a synthetic DeepSeek-V3 model with experts of
// 128 and its routed experts on the CPU expert engine
// (modeltest.FP8CheckpointCPUExperts).
func TestFP8CheckpointCPUExperts(t *testing.T) {
	src := t.TempDir()
	shape := engineShape(1)
	shape.MoEInter = 128
	if err := WriteSynthetic(src, shape, 6); err != nil {
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
