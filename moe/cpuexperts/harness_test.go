//go:build linux && amd64 && cgo

package cpuexperts

import "testing"

func newEngineCfg(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// BenchmarkDecodeHandoff times one-token Forward calls on a layer small
// enough that the hand-off dominates (16 experts, 256 x 256). Metrics: ns/op is the whole call; task-ns the
// engine's own time from publication to done; caller-ns the caller's time
// between a Sync's return and the next submit.
func BenchmarkDecodeHandoff(b *testing.B) {
	spec := small
	spec.Method = AMXINT4
	e := newEngineCfg(b, Config{Threads: 1, MaxTokens: 1, TopK: 8, Experts: spec.Experts, Hidden: spec.Hidden,
		Intermediate: spec.Intermediate, Trace: true})
	l, err := e.NewLayer(spec, sourceFor(spec.Method, spec))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	x, ids, w := RandomBatch(3, 1, 8, spec.Hidden, spec.Experts)
	batch := &Batch{Tokens: 1, TopK: 8, X: x, IDs: ids, Weights: w, Out: make([]float32, spec.Hidden)}
	if err := l.Forward(batch); err != nil {
		b.Fatal(err)
	}
	e.Trace()
	b.ResetTimer()
	for range b.N {
		if err := l.Forward(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	tr := e.Trace()
	b.ReportMetric(tr.AllDone*1e9, "task-ns")
	b.ReportMetric(tr.ReturnSub*1e9, "caller-ns")
	b.ReportMetric(tr.SubmitPick*1e9, "pick-ns")
}

// forwardRun is what forwardOnce returns besides an error.
type forwardRun struct {
	out     []float32
	phases  PhaseTimes
	kernels string // Engine.Kernels of the layer's method
}

// forwardOnce builds an engine of cfg and a layer of spec over src, runs b
// once (its output in a fresh slice) and closes both.
func forwardOnce(cfg Config, spec LayerSpec, src Source, b Batch) (forwardRun, error) {
	e, err := NewEngine(cfg)
	if err != nil {
		return forwardRun{}, err
	}
	defer e.Close()
	l, err := e.NewLayer(spec, src)
	if err != nil {
		return forwardRun{}, err
	}
	defer l.Close()
	b.Out = make([]float32, b.Tokens*spec.Hidden)
	err = l.Forward(&b)
	return forwardRun{b.Out, e.Phases(), e.Kernels(spec.Method)}, err
}

// TestTraceWork checks the traced decode tasks' work times: every worker
// runs gate/up and down blocks in a one-token task on one thread, so both
// are positive, and together they fit inside the worker's published ->
// done time.
func TestTraceWork(t *testing.T) {
	spec := small
	spec.Method = AMXINT8
	e := newEngineCfg(t, Config{Threads: 1, MaxTokens: 4, TopK: 4, Experts: spec.Experts, Hidden: spec.Hidden,
		Intermediate: spec.Intermediate, Trace: true})
	l, err := e.NewLayer(spec, sourceFor(spec.Method, spec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	x, ids, w := RandomBatch(9, 1, 4, spec.Hidden, spec.Experts)
	for range 5 {
		if err := l.Forward(&Batch{Tokens: 1, TopK: 4, X: x, IDs: ids, Weights: w, Out: make([]float32, spec.Hidden)}); err != nil {
			t.Fatal(err)
		}
	}
	tr := e.Trace()
	if tr.Tasks != 5 || tr.GateUpWork <= 0 || tr.DownWork <= 0 || tr.GateUpWork+tr.DownWork > tr.EndMean {
		t.Errorf("%d tasks: gate/up work %.2g s + down work %.2g s against %.2g s published -> done",
			tr.Tasks, tr.GateUpWork, tr.DownWork, tr.EndMean)
	}
}
