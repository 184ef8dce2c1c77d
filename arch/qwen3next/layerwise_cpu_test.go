package qwen3next

import (
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
)

// TestLayerwiseRefusedOffHybrid checks that layerwise prefill and the
// dynamic expert update are refused at load where they cannot apply: on
// the CPU backend (no hybrid step; over CPU ranks too, where rank 0 says
// so), and the update without the threshold.
func TestLayerwiseRefusedOffHybrid(t *testing.T) {
	dir, _ := writeEngineSynth(t, 3)
	for _, c := range []struct {
		name string
		o    arch.Options
		want string
	}{
		{"threshold on the CPU", arch.Options{Experts: "BF16", GPUPrefillThreshold: 16}, "belongs to the hybrid step"},
		{"threshold with the reference op", arch.Options{Experts: "backend", GPUPrefillThreshold: 16}, "belongs to the hybrid step"},
		{"update without threshold", arch.Options{Experts: "BF16", DynamicExpertUpdate: true}, "set --kt-gpu-prefill-token-threshold too"},
		{"threshold on 2 CPU ranks", arch.Options{Experts: "BF16", GPUPrefillThreshold: 16, Device: "cpu", TensorParallel: 2}, "belongs to the hybrid step"},
		{"update without threshold on 2 CPU ranks", arch.Options{Experts: "BF16", DynamicExpertUpdate: true, Device: "cpu", TensorParallel: 2}, "set --kt-gpu-prefill-token-threshold too"},
	} {
		c.o.MaxSeqs, c.o.MaxTotalTokens, c.o.MaxBatchTokens, c.o.Threads = 1, 64, 64, 2
		var r interface{ Close() error }
		var err error
		if c.o.TensorParallel > 1 {
			r, err = arch.Load(dir, c.o)
		} else {
			r, err = Load(dir, c.o)
		}
		if err == nil {
			r.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
