package deepseekv3

import (
	"strings"
	"testing"

	"github.com/ktserve/kt/arch/internal/modeltest"
)

// fixtures are the transformers reference checkpoints (testdata/models):
// q LoRA with grouped routing and a dense first layer (-a), one q_proj with
// fused experts (-b), YaRN rope scaling (-c), block-scaled FP8 (-fp8).
var fixtures = []string{"deepseekv3-a", "deepseekv3-b", "deepseekv3-c", "deepseekv3-fp8"}

// load loads fixture name on the CPU backend, SIMD or portable kernels.
func load(t *testing.T, name string, simd bool) testRunner {
	t.Helper()
	return testRunner{modeltest.LoadFixture(t, name, simd, "", Load)}
}

// TestMatchesTransformers checks every prompt logprob and, teacher-forcing
// the reference's greedy continuation through the KV cache, every greedy
// token (where the reference's top-2 margin exceeds 1e-3), its logprob and
// the top-8 logprobs, for the SIMD and the portable kernels.
func TestMatchesTransformers(t *testing.T) {
	modeltest.MatchesTransformersAll(t, fixtures, func(fx string) bool { return strings.HasSuffix(fx, "-a") }, func(t *testing.T, fx string, simd bool) modeltest.Runner {
		return load(t, fx, simd)
	})
}
