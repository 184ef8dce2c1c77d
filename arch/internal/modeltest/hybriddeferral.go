package modeltest

import (
	"math"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/moe/placement"
)

// HybridDeferral runs expert deferral in the hybrid step (routed experts
// on the CPU expert engine, the rest on gpu; the layer's deferred task runs
// on while the GPU runs the next layer) against the same deferral wholly on
// the CPU (load with a nil Backend), for D = 1 and 2, over a 3-token prompt
// and 8 teacher-forced decode steps, within tol; with GPU experts (3 per
// layer), which are never deferred, the run must move from its own D = 0.
// These runs are op by op (CUDA graphs off); the piecewise graph form
// (moeLayers + 1 graphs a step) runs deferral too and must give the
// op-by-op run's logprobs bit for bit, with and without GPU experts.
func HybridDeferral(t *testing.T, gpu backend.Backend, vocab, moeLayers int, tol float64, load func(o arch.Options) (EngineRunner, error)) {
	t.Helper()
	open := func(be backend.Backend, d int, gpuExperts placement.Request, graphs bool) (EngineRunner, error) {
		return load(arch.Options{Backend: be, MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 64, Threads: 2,
			Experts: "BF16", ExpertDeferral: d, GPUExperts: gpuExperts, DisableCUDAGraph: !graphs})
	}
	var decode []int32
	run := func(name string, be backend.Backend, d int, gpuExperts placement.Request, want string) [][]float64 {
		t.Helper()
		r, err := open(be, d, gpuExperts, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer r.Close()
		RequireExpertPath(t, name, r.ExpertPath(), want)
		rows, toks := DeferralRows(t, r, vocab, decode)
		if decode == nil {
			decode = toks
		}
		return rows
	}
	none, three := placement.Request{}, placement.Request{PerLayer: 3}
	cpu0 := run("cpu, D=0", nil, 0, none, "cpuexperts BF16")
	for _, d := range []int{1, 2} {
		cpuD := run("cpu", nil, d, none, "deferral:")
		hyb := run("hybrid", gpu, d, none, "deferral:")
		hyb3 := run("hybrid, 3 GPU experts per layer", gpu, d, three, "deferral:")
		hyb0 := run("hybrid, D=0", gpu, 0, none, "no routed expert on the GPU")
		hyb30 := run("hybrid, 3 GPU experts per layer, D=0", gpu, 0, three, "GPU experts per MoE layer 3,3")
		for _, c := range []struct {
			name      string
			got, want [][]float64
			tol       float64
		}{
			{"hybrid vs cpu", hyb, cpuD, tol},
			{"hybrid D=0 vs cpu D=0", hyb0, cpu0, tol},
		} {
			worst := WorstDiff(c.got, c.want)
			t.Logf("D=%d: %s: worst logprob difference %.3g", d, c.name, worst)
			if worst > c.tol {
				t.Errorf("D=%d: %s: logprobs differ by %g", d, c.name, worst)
			}
		}
		// piecewise graphs: decode steps replayed as 5 graphs with the
		// hand-offs between, the deferred task running on while the next
		// piece does
		for _, pc := range []struct {
			name    string
			req     placement.Request
			opByOp  [][]float64
			wantSeg int
		}{{"hybrid piecewise", none, hyb, moeLayers + 1}, {"hybrid piecewise, 3 GPU experts per layer", three, hyb3, moeLayers + 1}} {
			r, err := open(gpu, d, pc.req, true)
			if err != nil {
				t.Fatalf("%s: %v", pc.name, err)
			}
			if !strings.Contains(r.ExpertPath(), "piecewise") || !strings.Contains(r.ExpertPath(), "deferral:") {
				r.Close()
				t.Fatalf("%s: experts run on %q, want piecewise graphs with deferral", pc.name, r.ExpertPath())
			}
			rows, _ := DeferralRows(t, r, vocab, decode)
			st, _ := arch.GraphStatsOf(r)
			r.Close()
			if st.Off != "" || st.Failed != "" || st.Captures != 1 || st.Replays < 5 || st.Segments != pc.wantSeg {
				t.Errorf("D=%d: %s: graph stats %s (segments %d); want 1 capture, >= 5 replays, %d graphs per step", d, pc.name, st, st.Segments, pc.wantSeg)
			}
			worst := WorstDiff(rows, pc.opByOp)
			t.Logf("D=%d: %s vs op by op: worst logprob difference %.3g (%s)", d, pc.name, worst, st)
			if worst != 0 {
				t.Errorf("D=%d: %s differs from the op-by-op hybrid step by %g, want bit-identical", d, pc.name, worst)
			}
		}
		if moved := WorstDiff(hyb, hyb0); moved < 10*Tol {
			t.Errorf("D=%d: hybrid moved from D=0 by only %g: is deferral applied?", d, moved)
		} else {
			t.Logf("D=%d: hybrid moved from D=0 by %.3g", d, moved)
		}
		// GPU experts are never deferred (the GPU computes them with the
		// layer, as in SGLang-KT, where only the CPU task is split): the
		// run is not the all-CPU deferral, but it must defer the CPU's
		// share (move from its own D=0) and stay finite
		t.Logf("D=%d: hybrid with 3 GPU experts/layer vs cpu %.3g (GPU experts not deferred there)", d, WorstDiff(hyb3, cpuD))
		if moved := WorstDiff(hyb3, hyb30); !(moved >= 10*Tol) || math.IsNaN(moved) {
			t.Errorf("D=%d: hybrid with 3 GPU experts/layer moved from its D=0 by %g", d, moved)
		} else {
			t.Logf("D=%d: hybrid with 3 GPU experts/layer moved from its D=0 by %.3g", d, moved)
		}
	}
}
