package qwen3moe

import (
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
)

// TestExpertRecorder checks the expert-distribution recorder on the
// qwen3moe-c fixture (dense layers from mlp_only_layers) through the
// backend's MoE op, the CPU expert engine and decode graphs
// (modeltest.ExpertRecorder).
func TestExpertRecorder(t *testing.T) {
	modeltest.ExpertRecorder(t, fixtureDir("qwen3moe-c"), func(dir string, o arch.Options) (modeltest.Runner, error) {
		r, err := Load(dir, o)
		if err != nil {
			return nil, err
		}
		return testRunner{r}, nil
	})
}
