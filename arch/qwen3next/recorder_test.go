package qwen3next

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

// TestExpertRecorder checks the expert-distribution recorder on a
// synthetic Qwen3.5 model the CPU expert engine serves (Gated DeltaNet and
// attention layers, shared expert) through the backend's MoE op, the
// engine and decode graphs (modeltest.ExpertRecorder).
func TestExpertRecorder(t *testing.T) {
	dir, _ := writeEngineSynth(t, 3)
	modeltest.ExpertRecorder(t, dir, func(dir string, o arch.Options) (modeltest.Runner, error) {
		r, err := Load(dir, o)
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
