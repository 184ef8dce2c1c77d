//go:build linux && amd64 && cgo

package qwen3next

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/hybrid"
)

// TestHybridPrefetch runs the hybrid step's greedy decode (piecewise graphs
// and op by op) with the next-layer expert prefetch and without it: the
// logprobs must be the same bits (a prefetch only reads weights), the path
// must say which, and with it the engine must have been handed predicted
// experts to read (the timing report's prefetch line) and scored them
// against the picks (its prediction line). With the next piece launched
// ahead of the CPU experts' end (the default) and after it
// (KT_HYBRID_AHEAD=0) the same predictions must be read: the same score,
// per layer. With each layer predicted again at its start
// (KT_HYBRID_PREDICT=refine) the first predictions score the same and the
// second ones are scored too; with the prediction's misses streamed (the
// default) and in expert order (KT_HYBRID_MISS_STREAM=0, the plain
// piecewise case) the bits stay the same. It skips without a GPU.
func TestHybridPrefetch(t *testing.T) {
	gpu := openTestGPU(t)
	dir, shape := writeEngineSynth(t, 5)
	prompt := make([]int32, 12)
	for i := range prompt {
		prompt[i] = int32(i * 53 % shape.Vocab)
	}
	t.Setenv(hybrid.TimingEnv, "1")
	mbRe := regexp.MustCompile(`prefetch \(` + hybrid.PrefetchEnv + `\): ([0-9.]+) MB`)
	predRe := regexp.MustCompile(`prediction: ([0-9]+)% of the picks`)
	run := func(name, prefetch, graph, ahead, predict, miss string) ([][]float64, string) {
		t.Helper()
		t.Setenv(hybrid.PrefetchEnv, prefetch)
		t.Setenv(hybrid.GraphEnv, graph)
		t.Setenv(hybrid.AheadEnv, ahead)
		t.Setenv(hybrid.PredictEnv, predict)
		t.Setenv(hybrid.MissStreamEnv, miss)
		r, err := Load(dir, arch.Options{Backend: gpu, MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2, Experts: "AMXINT8"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer r.Close()
		on := prefetch != "0"
		if got := strings.Contains(r.ExpertPath(), "next-layer expert prefetch in decode steps"); got != on {
			t.Fatalf("%s: path %q; prefetch named: %v, want %v", name, r.ExpertPath(), got, on)
		}
		lps := greedyLogprobs(t, testRunner{r}, prompt, 5)
		timing := r.HybridTiming()
		t.Logf("%s: %s", name, timing)
		m := mbRe.FindStringSubmatch(timing)
		// piecewise decode steps prefetch; others have no idle time to fill
		if on && graph == "" && (m == nil || func() bool { v, _ := strconv.ParseFloat(m[1], 64); return v <= 0 }()) {
			t.Fatalf("%s: no predicted experts prefetched (timing %q)", name, timing)
		}
		if (!on || graph != "") && m != nil {
			t.Fatalf("%s: prefetched (%s=%s, %s=%s): %q", name, hybrid.PrefetchEnv, prefetch, hybrid.GraphEnv, graph, m[0])
		}
		// the prefetched predictions are scored against the picks (0-100 %)
		if p := predRe.FindStringSubmatch(timing); (p != nil) != (m != nil) ||
			p != nil && func() bool { v, _ := strconv.Atoi(p[1]); return v < 0 || v > 100 }() {
			t.Fatalf("%s: prediction score %q with prefetch line %q", name, p, m)
		}
		score := ""
		if i := strings.Index(timing, "prediction: "); i >= 0 {
			score, _, _ = strings.Cut(timing[i:], "\n") // the line, not the prefetch's read share after it
		}
		return lps, score
	}
	base, _ := run("no prefetch", "0", "", "", "", "")
	scores := map[string]string{}
	for _, c := range []struct{ name, mode, graph, ahead, predict, miss string }{{"prefetch, piecewise graphs", "", "", "0", "", "0"},
		{"prefetch, op by op", "1", "0", "", "", ""}, {"prefetch, piecewise graphs, ahead", "", "", "", "", ""},
		{"refined prefetch, misses streamed", "", "", "", "refine", "1"}} {
		got, score := run(c.name, c.mode, c.graph, c.ahead, c.predict, c.miss)
		scores[c.name] = score
		for i := range base {
			for v := range base[i] {
				if math.Float64bits(got[i][v]) != math.Float64bits(base[i][v]) {
					t.Fatalf("%s: row %d logprob %d = %v, %v without prefetch", c.name, i, v, got[i][v], base[i][v])
				}
			}
		}
	}
	if a, b := scores["prefetch, piecewise graphs, ahead"], scores["prefetch, piecewise graphs"]; a != b || a == "" {
		t.Fatalf("ahead hand-offs scored %q, plain ones %q: not the same predictions read", a, b)
	}
	r := scores["refined prefetch, misses streamed"]
	first, second, ok := strings.Cut(r, "; predicted again at the layer's start")
	if !ok || first != scores["prefetch, piecewise graphs, ahead"] || !regexp.MustCompile(`: [0-9]+% \(`).MatchString(second) {
		t.Fatalf("refined prefetch scored %q; want the first predictions' %q and a score of the second", r, scores["prefetch, piecewise graphs, ahead"])
	}
}
