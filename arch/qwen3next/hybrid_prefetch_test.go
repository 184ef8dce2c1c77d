//go:build linux && amd64 && cgo

package qwen3next

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/internal/settings"
)

// TestHybridPrefetch runs the hybrid step's greedy decode as piecewise
// graphs, where the next-layer expert prefetch runs, and op by op (CUDA
// graphs off), where it does not: the logprobs must be the same bits (a
// prefetch only reads weights, and a batch of one is a graph bucket: no
// padding), the path must name the prefetch, and in the graph run the
// engine must have been handed predicted experts to read (the timing
// report's prefetch line) and have scored them against the picks (its
// prediction line, 0-100 %, with a share for every MoE layer: the first
// one's prediction is made at the step's start). It skips without a GPU.
func TestHybridPrefetch(t *testing.T) {
	gpu := openTestGPU(t)
	dir, shape := writeEngineSynth(t, 5)
	prompt := make([]int32, 12)
	for i := range prompt {
		prompt[i] = int32(i * 53 % shape.Vocab)
	}
	t.Setenv(settings.HybridTiming.Name, "1")
	mbRe := regexp.MustCompile(`prefetch: ([0-9.]+) MB`)
	predRe := regexp.MustCompile(`prediction: ([0-9]+)% of the picks.*per MoE layer ([0-9 ]+)\)`)
	run := func(name string, graphs bool) [][]float64 {
		t.Helper()
		r, err := Load(dir, arch.Options{Backend: gpu, MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: "AMXINT8",
			DisableCUDAGraph: !graphs})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer r.Close()
		if !strings.Contains(r.ExpertPath(), "next-layer expert prefetch in decode steps") {
			t.Fatalf("%s: path %q does not name the prefetch", name, r.ExpertPath())
		}
		lps := greedyLogprobs(t, testRunner{r}, prompt, 5)
		timing := r.HybridTiming()
		t.Logf("%s: %s", name, timing)
		m := mbRe.FindStringSubmatch(timing)
		if graphs && (m == nil || func() bool { v, _ := strconv.ParseFloat(m[1], 64); return v <= 0 }()) {
			t.Fatalf("%s: no predicted experts prefetched (timing %q)", name, timing)
		}
		if !graphs && m != nil {
			t.Fatalf("%s: prefetched op by op: %q", name, m[0])
		}
		p := predRe.FindStringSubmatch(timing)
		if (p != nil) != graphs || p != nil && func() bool { v, _ := strconv.Atoi(p[1]); return v < 0 || v > 100 }() {
			t.Fatalf("%s: prediction score %q (graphs %v)", name, p, graphs)
		}
		if p != nil && len(strings.Fields(p[2])) != shape.Layers {
			t.Fatalf("%s: prediction scored for MoE layers %q, want all %d", name, p[2], shape.Layers)
		}
		return lps
	}
	base := run("op by op", false)
	got := run("piecewise graphs", true)
	for i := range base {
		for v := range base[i] {
			if math.Float64bits(got[i][v]) != math.Float64bits(base[i][v]) {
				t.Fatalf("row %d logprob %d = %v with the prefetch, %v op by op", i, v, got[i][v], base[i][v])
			}
		}
	}
}
