//go:build linux && amd64 && cgo

package qwen3next

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

// TestHybridDeferral runs expert deferral in the hybrid step on a
// synthetic Qwen3.5 model the engine serves (4 MoE layers)
// against the same deferral wholly on the CPU, op by op and as piecewise
// graphs (modeltest.HybridDeferral). It skips without a GPU.
func TestHybridDeferral(t *testing.T) {
	gpu := openTestGPU(t)
	dir, shape := writeEngineSynth(t, 3)
	modeltest.HybridDeferral(t, gpu, shape.Vocab, shape.Layers, hybridTol, func(o arch.Options) (modeltest.EngineRunner, error) {
		r, err := Load(dir, o)
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
