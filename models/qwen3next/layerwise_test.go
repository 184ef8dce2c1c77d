//go:build linux && amd64 && cgo

package qwen3next

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/models"
	"github.com/ktserve/kt/models/internal/modeltest"
	"github.com/ktserve/kt/models/internal/routed"
	"github.com/ktserve/kt/moe/placement"
)

// lwOp is one forward pass of a layerwise test script: toks fed to slot
// (a prefill when len(toks) > 1), and whether the picks are counted.
type lwOp struct {
	slot   int
	toks   []int32
	record bool
}

// lwScript is the layerwise tests' sequence of passes: slot 0 prefills 8
// tokens (below the threshold of 16) and decodes 3 (its decode bucket's
// graph is captured with the placement of the load), slot 1 prefills 40
// tokens (≥ 16: layerwise, with its picks counted), then both decode more
// (slot 0's steps replay the graph captured before). Tokens are fixed, so
// every run sees the same inputs.
func lwScript(vocab int) []lwOp {
	toks := func(n, mul, add int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32((i*mul + add) % vocab)
		}
		return s
	}
	ops := []lwOp{{slot: 0, toks: toks(8, 37, 5)}}
	for i := range 3 {
		ops = append(ops, lwOp{slot: 0, toks: []int32{int32(11 + 7*i)}})
	}
	ops = append(ops, lwOp{slot: 1, toks: toks(40, 53, 17), record: true})
	for i := range 4 {
		ops = append(ops, lwOp{slot: 0, toks: []int32{int32(101 + 13*i)}}, lwOp{slot: 1, toks: []int32{int32(200 + 3*i)}})
	}
	return ops
}

// pickCounter counts the router's picks per layer while on
// (models.ExpertRecorder).
type pickCounter struct {
	on     bool
	counts map[int][]int
	E      int
}

func (p *pickCounter) Recording() bool { return p.on }

func (p *pickCounter) Add(layer int, ids []int32) {
	if p.counts[layer] == nil {
		p.counts[layer] = make([]int, p.E)
	}
	routed.CountPicks(p.counts[layer], ids)
}

// lwRun is one run of the script: every pass's logprob rows, and the
// runner's layerwise stats, graph stats and per-layer GPU expert masks at
// the end.
type lwRun struct {
	rows   [][]float64   // every pass's rows, in order
	ops    [][][]float64 // per pass of lwScript: its rows
	lw     routed.LayerwiseStats
	graphs models.GraphStats
	masks  [][]bool
	counts map[int][]int
}

// runScript loads the synthetic model in dir with o and runs lwScript.
func runScript(t *testing.T, dir string, vocab, experts int, name string, o models.Options, want string) lwRun {
	t.Helper()
	rec := &pickCounter{counts: map[int][]int{}, E: experts}
	o.MaxSeqs, o.MaxTotalTokens, o.MaxBatchTokens, o.Threads, o.ExpertRecorder = 2, 128, 64, 2, rec
	r, err := Load(dir, o)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer r.Close()
	t.Logf("%s: %s", name, r.ExpertPath())
	if !strings.Contains(r.ExpertPath(), want) {
		t.Fatalf("%s: experts run on %q, want %q", name, r.ExpertPath(), want)
	}
	var run lwRun
	for _, op := range lwScript(vocab) {
		rec.on = op.record
		var rows [][]float64
		for _, row := range modeltest.Forward(t, testRunner{r}, op.slot, op.toks, true) {
			rows = append(rows, modeltest.LogSoftmax(row))
		}
		run.rows = append(run.rows, rows...)
		run.ops = append(run.ops, rows)
	}
	run.lw = r.routed.LayerwiseStats()
	run.graphs, _ = models.GraphStatsOf(r)
	for _, w := range r.moe {
		if w != nil {
			run.masks = append(run.masks, slices.Clone(w.GPU))
		}
	}
	run.counts = rec.counts
	t.Logf("%s: layerwise %+v; decode graphs: %s", name, run.lw, run.graphs)
	return run
}

// rowsOf returns r's rows of the passes of lwScript that keep says.
func rowsOf(r lwRun, vocab int, keep func(op lwOp) bool) [][]float64 {
	var rows [][]float64
	for i, op := range lwScript(vocab) {
		if keep(op) {
			rows = append(rows, r.ops[i]...)
		}
	}
	return rows
}

// deferralRows compares a layerwise run with expert deferral: deferral
// changes the numbers, and a layerwise pass defers nothing (every routed
// expert runs on the GPU in the layer), so slot 0's passes (never
// layerwise, never mixed with slot 1) must match the CPU run with the same
// deferral and the 40-token prefill the CPU run without; slot 1's decode
// steps read a KV cache made without deferral and are not compared.
func deferralRows(t *testing.T, name string, got, cpuDef, cpuRef lwRun, vocab int) {
	t.Helper()
	slot0 := func(op lwOp) bool { return op.slot == 0 }
	big := func(op lwOp) bool { return op.record }
	for _, c := range []struct {
		what      string
		got, want [][]float64
	}{
		{"slot 0 vs cpu with deferral", rowsOf(got, vocab, slot0), rowsOf(cpuDef, vocab, slot0)},
		{"layerwise prefill vs cpu without deferral", rowsOf(got, vocab, big), rowsOf(cpuRef, vocab, big)},
	} {
		worst := worstDiff(c.got, c.want)
		t.Logf("%s, %s: worst logprob difference %.3g over %d rows", name, c.what, worst, len(c.want))
		if worst > hybridTol {
			t.Errorf("%s, %s: logprobs differ by %g", name, c.what, worst)
		}
	}
}

// worstDiff is the largest |a − b| over two runs' logprob rows.
func worstDiff(a, b [][]float64) float64 {
	var worst float64
	for i := range b {
		for v := range b[i] {
			worst = math.Max(worst, math.Abs(a[i][v]-b[i][v]))
		}
	}
	return worst
}

// TestLayerwisePrefill runs the synthetic Qwen3.5 model in the hybrid
// step with layerwise GPU prefill (--kt-gpu-prefill-token-threshold 16:
// the 40-token prefill runs every routed expert on the GPU, streamed
// layer by layer through the shadow buffers; the 8-token prefill and the
// decode steps run the normal hybrid step, decode as CUDA graphs) and
// compares every logprob with the model wholly on the CPU and with the
// normal hybrid run, within the hybrid tolerance; with GPU experts, with
// expert deferral (deferralRows), with a threshold of 1 and graphs off (every pass
// layerwise), and above the prompt (never layerwise: the hybrid run's
// numbers). It skips without a GPU.
func TestLayerwisePrefill(t *testing.T) {
	gpu, err := cuda.NewBackend(cuda.Options{MemFractionStatic: 0.2})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer gpu.Close()
	dir, shape := writeEngineSynth(t, 3)
	run := func(name string, be backend.Backend, o models.Options, want string) lwRun {
		o.Backend = be
		if o.Experts == "" {
			o.Experts = "BF16"
		}
		return runScript(t, dir, shape.Vocab, shape.Experts, name, o, want)
	}
	const moeLayers = 4
	cpuRef := run("cpu", nil, models.Options{}, "cpuexperts BF16")
	hybrid := run("hybrid", gpu, models.Options{}, "no routed expert on the GPU")
	lw := run("layerwise 16", gpu, models.Options{GPUPrefillThreshold: 16}, "layerwise prefill: forward passes of ≥ 16 tokens")
	lw3 := run("layerwise 16, 3 GPU experts", gpu, models.Options{GPUPrefillThreshold: 16, GPUExperts: placement.Request{PerLayer: 3}}, "layerwise prefill")
	lwDef := run("layerwise 16, deferral 1", gpu, models.Options{GPUPrefillThreshold: 16, ExpertDeferral: 1}, "deferral")
	lwAll := run("layerwise 1, graphs off", gpu, models.Options{GPUPrefillThreshold: 1, DisableCUDAGraph: true}, "layerwise prefill")
	lwNever := run("layerwise 41", gpu, models.Options{GPUPrefillThreshold: 41}, "layerwise prefill")

	for _, c := range []struct {
		name   string
		r      lwRun
		steps  int
		graphs bool
	}{
		{"layerwise 16", lw, 1, true},
		{"layerwise 16, 3 GPU experts", lw3, 1, true},
		{"layerwise 16, deferral 1", lwDef, 1, true},
		{"layerwise 1, graphs off", lwAll, len(lwScript(shape.Vocab)), false},
		{"layerwise 41", lwNever, 0, true},
	} {
		if c.r.lw.Steps != c.steps || c.r.lw.Layers != c.steps*moeLayers {
			t.Errorf("%s: %d layerwise passes over %d layers, want %d over %d", c.name, c.r.lw.Steps, c.r.lw.Layers, c.steps, c.steps*moeLayers)
		}
		if c.steps > 0 && (c.r.lw.Uploads == 0 || c.r.lw.UploadBytes == 0) {
			t.Errorf("%s: no upload counted: %+v", c.name, c.r.lw)
		}
		if g := c.r.graphs; c.graphs && (g.Off != "" || g.Failed != "" || g.Captures != 1 || g.Replays < 8) {
			t.Errorf("%s: graph stats %s; want 1 capture and the later decode steps replayed", c.name, g)
		}
	}
	var spread float64
	for _, row := range cpuRef.rows {
		for v := range row {
			spread = math.Max(spread, math.Abs(row[v]-row[0]))
		}
	}
	if spread < 0.5 {
		t.Fatalf("synthetic model too flat to compare (spread %g)", spread)
	}
	for _, c := range []struct {
		name      string
		got, want lwRun
	}{
		{"hybrid vs cpu", hybrid, cpuRef},
		{"layerwise 16 vs cpu", lw, cpuRef},
		{"layerwise 16 vs hybrid", lw, hybrid},
		{"layerwise 16 3 GPU experts vs cpu", lw3, cpuRef},
		{"layerwise 1 graphs off vs cpu", lwAll, cpuRef},
	} {
		worst := worstDiff(c.got.rows, c.want.rows)
		t.Logf("%s: worst logprob difference %.3g over %d rows (spread %.3g)", c.name, worst, len(c.want.rows), spread)
		if worst > hybridTol {
			t.Errorf("%s: logprobs differ by %g", c.name, worst)
		}
	}
	cpuDef := run("cpu, deferral 1", nil, models.Options{ExpertDeferral: 1}, "deferral")
	deferralRows(t, "layerwise 16, deferral 1", lwDef, cpuDef, cpuRef, shape.Vocab)
	// the same path as the hybrid run (only the shadow buffers allocated):
	// expected bit for bit; 1e-6 leaves room for a library choosing another
	// algorithm for other buffer addresses
	w := worstDiff(lwNever.rows, hybrid.rows)
	t.Logf("threshold above every pass vs hybrid: worst logprob difference %.3g", w)
	if w > 1e-6 {
		t.Errorf("threshold above every pass: logprobs differ from the hybrid run by %g", w)
	}
}

// TestDynamicExpertUpdate runs the script with 3 GPU experts per layer
// (uniform: experts 0, 1, 2), layerwise prefill from 16 tokens and the
// dynamic update: after the 40-token prefill each MoE layer's GPU experts
// must be that prefill's 3 most picked (counted by a recorder, ties to
// the lower id), and every logprob — slot 0's decode steps replaying the
// graph captured before the update included — must match the model wholly
// on the CPU within the hybrid tolerance (with and without expert
// deferral). It skips without a GPU.
func TestDynamicExpertUpdate(t *testing.T) {
	gpu, err := cuda.NewBackend(cuda.Options{MemFractionStatic: 0.2})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer gpu.Close()
	dir, shape := writeEngineSynth(t, 3)
	three := placement.Request{PerLayer: 3}
	cpuRef := runScript(t, dir, shape.Vocab, shape.Experts, "cpu", models.Options{Experts: "BF16"}, "cpuexperts BF16")
	cpuDef := runScript(t, dir, shape.Vocab, shape.Experts, "cpu, deferral 1", models.Options{Experts: "BF16", ExpertDeferral: 1}, "deferral")
	for _, d := range []int{0, 1} {
		o := models.Options{Backend: gpu, Experts: "BF16", GPUExperts: three, GPUPrefillThreshold: 16, DynamicExpertUpdate: true, ExpertDeferral: d}
		name := "dynamic update"
		if d > 0 {
			name += ", deferral 1"
		}
		got := runScript(t, dir, shape.Vocab, shape.Experts, name, o, "dynamic expert update")
		if got.lw.Steps != 1 || got.lw.Updates == 0 || got.lw.Moved == 0 {
			t.Errorf("%s: layerwise %+v: want one layerwise pass that moved experts (else the fixture's hottest experts are 0-2: change the seed)", name, got.lw)
		}
		if g := got.graphs; g.Off != "" || g.Failed != "" || g.Captures != 1 || g.Replays < 8 {
			t.Errorf("%s: graph stats %s; want 1 capture (before the update) replayed after it", name, g)
		}
		l := 0
		for layer := range shape.Layers {
			counts := got.counts[layer]
			if counts == nil {
				continue
			}
			want := make([]bool, shape.Experts)
			routed.MaskFromSlots(want, routed.HottestExperts(counts, 3))
			if l >= len(got.masks) || !slices.Equal(got.masks[l], want) {
				t.Errorf("%s: layer %d: GPU experts %v after the update, want %v (picks %v)", name, layer, got.masks[l], want, counts)
			}
			l++
		}
		if l != len(got.masks) || l == 0 {
			t.Errorf("%s: picks counted for %d MoE layers, the model has %d", name, l, len(got.masks))
		}
		if d > 0 {
			deferralRows(t, name, got, cpuDef, cpuRef, shape.Vocab)
			continue
		}
		worst := worstDiff(got.rows, cpuRef.rows)
		t.Logf("%s vs cpu: worst logprob difference %.3g over %d rows", name, worst, len(cpuRef.rows))
		if worst > hybridTol {
			t.Errorf("%s vs cpu: logprobs differ by %g", name, worst)
		}
	}
}
