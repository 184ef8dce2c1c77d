//go:build linux && amd64 && cgo

package ktformat

import (
	"math"
	"testing"

	"github.com/ktserve/kt/moe/cpuexperts"
)

// small shapes: every kernel path, fast on 2 cores
var small = cpuexperts.LayerSpec{Experts: 16, Hidden: 256, Intermediate: 256}

// relErr is the relative L2 error of got against want.
func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// newEngine starts an engine sized for spec (closed when the test ends).
func newEngine(t testing.TB, spec cpuexperts.LayerSpec, pools, threads, maxTok, topK int) *cpuexperts.Engine {
	t.Helper()
	e, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: threads, Pools: pools, MaxTokens: maxTok, TopK: topK,
		Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}
