//go:build linux && amd64 && cgo

package qwen3next

import (
	"math"
	"slices"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/hybrid"
	"github.com/ktserve/kt/internal/settings"
	"github.com/ktserve/kt/moe/placement"
)

// lwOp is one forward pass of a layerwise test script: toks fed to slot
// (a prefill when len(toks) > 1); tag > 0 counts the pass's picks under
// that tag.
type lwOp struct {
	slot, tag int
	toks      []int32
}

// lwScript is a layerwise test's sequence of passes over two slots; the
// tokens are fixed, so every run sees the same inputs:
//
//   - slot 0 prefills 40 tokens (tag 1; bigFirst) or 8 (below the
//     threshold of 16, so slot 0 never runs layerwise) and decodes 3
//     steps: its decode bucket's graph is captured;
//   - slot 1 prefills 40 tokens (tag 2; ≥ 16: layerwise);
//   - both decode 4 more steps each, replaying that graph.
//
// With bigFirst every buffer has grown to the 40-token pass before the
// capture, so the graph captured before slot 1's pass (and its dynamic
// update) is the one replayed after it.
func lwScript(vocab int, bigFirst bool) []lwOp {
	toks := func(n, mul, add int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32((i*mul + add) % vocab)
		}
		return s
	}
	first := lwOp{slot: 0, toks: toks(8, 37, 5)}
	if bigFirst {
		first = lwOp{slot: 0, tag: 1, toks: toks(40, 37, 5)}
	}
	ops := []lwOp{first}
	for i := range 3 {
		ops = append(ops, lwOp{slot: 0, toks: []int32{int32(11 + 7*i)}})
	}
	ops = append(ops, lwOp{slot: 1, tag: 2, toks: toks(40, 53, 17)})
	for i := range 4 {
		ops = append(ops, lwOp{slot: 0, toks: []int32{int32(101 + 13*i)}}, lwOp{slot: 1, toks: []int32{int32(200 + 3*i)}})
	}
	return ops
}

// pickCounter counts the router's picks per tag and layer while tag > 0
// (arch.ExpertRecorder).
type pickCounter struct {
	tag    int
	counts map[int]map[int][]int // tag → layer → picks per expert
	E      int
}

func (p *pickCounter) Recording() bool { return p.tag > 0 }

func (p *pickCounter) Add(layer int, ids []int32) {
	byLayer := p.counts[p.tag]
	if byLayer == nil {
		byLayer = map[int][]int{}
		p.counts[p.tag] = byLayer
	}
	if byLayer[layer] == nil {
		byLayer[layer] = make([]int, p.E)
	}
	hybrid.CountPicks(byLayer[layer], ids)
}

// lwRun is one run of a script: every pass's logprob rows, and the
// runner's layerwise stats, graph stats and per-MoE-layer GPU expert
// masks at the end.
type lwRun struct {
	script []lwOp
	rows   [][]float64   // every pass's rows, in order
	ops    [][][]float64 // per pass: its rows
	lw     hybrid.LayerwiseStats
	graphs arch.GraphStats
	masks  [][]bool
	counts map[int]map[int][]int
}

// runScript loads the synthetic model in dir with o and runs script.
func runScript(t *testing.T, dir string, experts int, script []lwOp, name string, o arch.Options, want string) lwRun {
	t.Helper()
	rec := &pickCounter{counts: map[int]map[int][]int{}, E: experts}
	o.MaxSeqs, o.MaxTotalTokens, o.MaxBatchTokens, o.Threads, o.ExpertRecorder = 2, 128, 64, 2, rec
	r, err := Load(dir, o)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer r.Close()
	modeltest.RequireExpertPath(t, name, r.ExpertPath(), want)
	run := lwRun{script: script}
	for _, op := range script {
		rec.tag = op.tag
		rows := modeltest.LogSoftmaxRows(modeltest.Forward(t, testRunner{r}, op.slot, op.toks, true))
		run.rows = append(run.rows, rows...)
		run.ops = append(run.ops, rows)
	}
	run.lw = r.routed.LayerwiseStats()
	run.graphs, _ = arch.GraphStatsOf(r)
	for _, w := range r.moe {
		if w != nil {
			run.masks = append(run.masks, slices.Clone(w.GPU))
		}
	}
	run.counts = rec.counts
	t.Logf("%s: layerwise %+v; decode graphs: %s", name, run.lw, run.graphs)
	return run
}

// rowsOf returns r's rows of the passes keep says.
func rowsOf(r lwRun, keep func(op lwOp) bool) [][]float64 {
	var rows [][]float64
	for i, op := range r.script {
		if keep(op) {
			rows = append(rows, r.ops[i]...)
		}
	}
	return rows
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

// within fails unless got and want differ by at most hybridTol.
func within(t *testing.T, what string, got, want [][]float64) {
	t.Helper()
	worst := worstDiff(got, want)
	t.Logf("%s: worst logprob difference %.3g over %d rows", what, worst, len(want))
	if len(got) != len(want) || worst > hybridTol {
		t.Errorf("%s: logprobs differ by %g (%d rows, want %d)", what, worst, len(got), len(want))
	}
}

// deferralRows compares a layerwise run with expert deferral of the
// script without bigFirst: deferral changes the numbers and a layerwise
// pass defers nothing (every routed expert runs on the GPU), so slot 0's
// passes (never layerwise, never mixed with slot 1) must match the CPU run
// with the same deferral, and slot 1's 40-token prefill the CPU run
// without; slot 1's decode steps read a KV cache made without deferral and
// are not compared.
func deferralRows(t *testing.T, name string, got, cpuDef, cpuRef lwRun) {
	t.Helper()
	slot0 := func(op lwOp) bool { return op.slot == 0 }
	big := func(op lwOp) bool { return op.tag == 2 }
	within(t, name+", slot 0 vs cpu with deferral", rowsOf(got, slot0), rowsOf(cpuDef, slot0))
	within(t, name+", layerwise prefill vs cpu without deferral", rowsOf(got, big), rowsOf(cpuRef, big))
}

// checkGraphs fails unless decode graphs ran: captured once (exactly, when
// once) and replayed for the later decode steps.
func checkGraphs(t *testing.T, name string, g arch.GraphStats, once bool) {
	t.Helper()
	if g.Off != "" || g.Failed != "" || g.Captures < 1 || (once && g.Captures != 1) || g.Replays < 8 {
		t.Errorf("%s: graph stats %s; want decode graphs captured (once: %v) and replayed", name, g, once)
	}
}

// TestLayerwisePrefill runs the synthetic Qwen3.5 model in the hybrid
// step with layerwise GPU prefill (--kt-gpu-prefill-token-threshold 16:
// the 40-token prefills run every routed expert on the GPU, streamed
// layer by layer through the shadow buffers; decode steps run the normal
// hybrid step as CUDA graphs) and compares every logprob with the model
// wholly on the CPU and with the normal hybrid run, within the hybrid
// tolerance; with GPU experts, with expert deferral (deferralRows), with
// a threshold of 1 and graphs off (every pass layerwise), with one shadow
// buffer (KT_LAYERWISE_BUFFERS=1: the two-buffer run's numbers), and
// above every pass (never layerwise: the hybrid run's numbers). It skips
// without a GPU.
func TestLayerwisePrefill(t *testing.T) {
	gpu := openTestGPU(t)
	dir, shape := writeEngineSynth(t, 3)
	big, small := lwScript(shape.Vocab, true), lwScript(shape.Vocab, false)
	run := func(name string, script []lwOp, be backend.Backend, o arch.Options, want string) lwRun {
		o.Backend = be
		if o.Experts == "" {
			o.Experts = "BF16"
		}
		return runScript(t, dir, shape.Experts, script, name, o, want)
	}
	const moeLayers = 4
	cpuRef := run("cpu", big, nil, arch.Options{}, "cpuexperts BF16")
	hyb := run("hybrid", big, gpu, arch.Options{}, "no routed expert on the GPU")
	lw := run("layerwise 16", big, gpu, arch.Options{GPUPrefillThreshold: 16}, "layerwise prefill: forward passes of ≥ 16 tokens")
	lw3 := run("layerwise 16, 3 GPU experts", big, gpu, arch.Options{GPUPrefillThreshold: 16, GPUExperts: placement.Request{PerLayer: 3}}, "layerwise prefill")
	lwAll := run("layerwise 1, graphs off", big, gpu, arch.Options{GPUPrefillThreshold: 1, DisableCUDAGraph: true}, "layerwise prefill")
	lwNever := run("layerwise 41", big, gpu, arch.Options{GPUPrefillThreshold: 41}, "layerwise prefill")
	// the GPU MoE op's grouped path (prefill-sized steps; forced for these)
	gpu.SetMoEGroupedMin(1)
	grouped0 := gpu.MoEGroupedRuns()
	lwGrouped := run("layerwise 16, grouped MoE", big, gpu, arch.Options{GPUPrefillThreshold: 16}, "layerwise prefill")
	groupedRuns := gpu.MoEGroupedRuns() - grouped0
	gpu.SetMoEGroupedMin(0)
	t.Setenv(settings.LayerwiseBuffers.Name, "1")
	lwOne := run("layerwise 16, one shadow buffer", big, gpu, arch.Options{GPUPrefillThreshold: 16}, "1 shadow layer buffer(s)")
	t.Setenv(settings.LayerwiseBuffers.Name, "")
	cpuRefSmall := run("cpu, small first prefill", small, nil, arch.Options{}, "cpuexperts BF16")
	cpuDef := run("cpu, deferral 1", small, nil, arch.Options{ExpertDeferral: 1}, "deferral")
	lwDef := run("layerwise 16, deferral 1", small, gpu, arch.Options{GPUPrefillThreshold: 16, ExpertDeferral: 1}, "deferral")

	for _, c := range []struct {
		name   string
		r      lwRun
		steps  int
		graphs bool
	}{
		{"layerwise 16", lw, 2, true},
		{"layerwise 16, 3 GPU experts", lw3, 2, true},
		{"layerwise 1, graphs off", lwAll, len(big), false},
		{"layerwise 41", lwNever, 0, true},
		{"layerwise 16, grouped MoE", lwGrouped, 2, true},
		{"layerwise 16, one shadow buffer", lwOne, 2, true},
		{"layerwise 16, deferral 1", lwDef, 1, true},
	} {
		if c.r.lw.Steps != c.steps || c.r.lw.Layers != c.steps*moeLayers {
			t.Errorf("%s: %d layerwise passes over %d layers, want %d over %d", c.name, c.r.lw.Steps, c.r.lw.Layers, c.steps, c.steps*moeLayers)
		}
		if c.steps > 0 && (c.r.lw.Uploads == 0 || c.r.lw.UploadBytes == 0) {
			t.Errorf("%s: no upload counted: %+v", c.name, c.r.lw)
		}
		if c.graphs {
			// the deferral run's first prefill is smaller than its
			// layerwise one, which may regrow a buffer and re-capture
			checkGraphs(t, c.name, c.r.graphs, c.r.script[0].tag == 1)
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
	within(t, "hybrid vs cpu", hyb.rows, cpuRef.rows)
	within(t, "layerwise 16 vs cpu", lw.rows, cpuRef.rows)
	within(t, "layerwise 16 vs hybrid", lw.rows, hyb.rows)
	within(t, "layerwise 16, 3 GPU experts vs cpu", lw3.rows, cpuRef.rows)
	within(t, "layerwise 1, graphs off vs cpu", lwAll.rows, cpuRef.rows)
	within(t, "layerwise 16, one shadow buffer vs cpu", lwOne.rows, cpuRef.rows)
	within(t, "layerwise 16, grouped MoE vs cpu", lwGrouped.rows, cpuRef.rows)
	if groupedRuns < 2*moeLayers {
		t.Errorf("grouped MoE: %d MoE calls took the grouped path, want at least the %d of the layerwise passes", groupedRuns, 2*moeLayers)
	}
	// the same ops, the uploads ordered otherwise: bit for bit expected
	// (1e-6: as for the run above every pass)
	if w := worstDiff(lwOne.rows, lw.rows); w > 1e-6 {
		t.Errorf("one shadow buffer vs two: logprobs differ by %g", w)
	}
	deferralRows(t, "layerwise 16, deferral 1", lwDef, cpuDef, cpuRefSmall)
	// the same path as the hybrid run (only the shadow buffers and the MoE
	// scratch allocated): expected bit for bit; 1e-6 leaves room for a
	// library choosing another algorithm for other buffer addresses
	w := worstDiff(lwNever.rows, hyb.rows)
	t.Logf("threshold above every pass vs hybrid: worst logprob difference %.3g", w)
	if w > 1e-6 {
		t.Errorf("threshold above every pass: logprobs differ from the hybrid run by %g", w)
	}
}

// TestDynamicExpertUpdate runs the script with 3 GPU experts per layer
// (uniform: experts 0, 1, 2), layerwise prefill from 16 tokens and the
// dynamic update: after each 40-token prefill each MoE layer's GPU experts
// must be that prefill's 3 most picked (counted by a recorder, ties to the
// lower id), the second update must move experts while slot 0's decode
// graph, captured between the two, is replayed after it, and every
// logprob must match the model wholly on the CPU within the hybrid
// tolerance; again with expert deferral on the script with a small first
// prefill (GPU experts are never deferred, so the references differ: see
// the comment there). It skips without a GPU.
func TestDynamicExpertUpdate(t *testing.T) {
	gpu := openTestGPU(t)
	dir, shape := writeEngineSynth(t, 3)
	big, small := lwScript(shape.Vocab, true), lwScript(shape.Vocab, false)
	three := placement.Request{PerLayer: 3}
	dyn := func(d int) arch.Options {
		return arch.Options{Backend: gpu, Experts: "BF16", GPUExperts: three, GPUPrefillThreshold: 16, DynamicExpertUpdate: true, ExpertDeferral: d}
	}
	cpuRef := runScript(t, dir, shape.Experts, big, "cpu", arch.Options{Experts: "BF16"}, "cpuexperts BF16")
	got := runScript(t, dir, shape.Experts, big, "dynamic update", dyn(0), "dynamic expert update")
	hottest := func(tag, layer int) []bool {
		m := make([]bool, shape.Experts)
		hybrid.MaskFromSlots(m, hybrid.HottestExperts(got.counts[tag][layer], 3))
		return m
	}
	moved := false // the second update changes some layer
	l := 0
	for layer := range shape.Layers {
		if got.counts[2][layer] == nil {
			continue
		}
		moved = moved || !slices.Equal(hottest(1, layer), hottest(2, layer))
		if want := hottest(2, layer); l >= len(got.masks) || !slices.Equal(got.masks[l], want) {
			t.Errorf("layer %d: GPU experts %v after the updates, want %v (picks of the last layerwise pass %v)", layer, got.masks[min(l, len(got.masks)-1)], want, got.counts[2][layer])
		}
		l++
	}
	if l != len(got.masks) || l == 0 {
		t.Errorf("picks counted for %d MoE layers, the model has %d", l, len(got.masks))
	}
	if !moved {
		t.Fatalf("the two prefills have the same hottest experts in every layer: the second update moves nothing (change the script's tokens)")
	}
	if got.lw.Steps != 2 || got.lw.Updates < 2 || got.lw.Moved == 0 {
		t.Errorf("layerwise %+v: want 2 layerwise passes whose updates moved experts", got.lw)
	}
	checkGraphs(t, "dynamic update", got.graphs, true)
	within(t, "dynamic update vs cpu", got.rows, cpuRef.rows)

	// with deferral: GPU experts are never deferred, so a hybrid run with
	// GPU experts is not the CPU run with deferral; before the update it is
	// the hybrid run with the same placement and deferral and no
	// threshold, the layerwise pass (no deferral) is the CPU run without,
	// and after the update the placement is the run's own
	cpuSmall := runScript(t, dir, shape.Experts, small, "cpu, small first prefill", arch.Options{Experts: "BF16"}, "cpuexperts BF16")
	hybDef := runScript(t, dir, shape.Experts, small, "hybrid, 3 GPU experts, deferral 1",
		arch.Options{Backend: gpu, Experts: "BF16", GPUExperts: three, ExpertDeferral: 1}, "deferral")
	gotDef := runScript(t, dir, shape.Experts, small, "dynamic update, deferral 1", dyn(1), "dynamic expert update")
	if gotDef.lw.Steps != 1 || gotDef.lw.Updates == 0 {
		t.Errorf("dynamic update, deferral 1: layerwise %+v: want 1 layerwise pass with an update", gotDef.lw)
	}
	checkGraphs(t, "dynamic update, deferral 1", gotDef.graphs, false)
	before, big2 := 0, func(op lwOp) bool { return op.tag == 2 }
	for _, op := range small {
		if op.tag == 2 {
			break
		}
		before++
	}
	var pre, preRef [][]float64
	for i := range before {
		pre, preRef = append(pre, gotDef.ops[i]...), append(preRef, hybDef.ops[i]...)
	}
	within(t, "dynamic update, deferral 1, passes before the update vs hybrid with deferral", pre, preRef)
	within(t, "dynamic update, deferral 1, layerwise prefill vs cpu without deferral", rowsOf(gotDef, big2), rowsOf(cpuSmall, big2))
	for i, row := range gotDef.rows {
		for v, x := range row {
			if math.IsNaN(x) || math.IsInf(x, 1) {
				t.Fatalf("dynamic update, deferral 1: row %d logprob %d = %v", i, v, x)
			}
		}
	}
}
