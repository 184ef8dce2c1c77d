//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"slices"
	"testing"
)

// TestSyncHelpBitwise runs decode tasks with and without the waiting
// caller joining them as a worker (Config.SyncHelp) and requires bitwise
// equal outputs, through Forward and through Submit + Sync, for every
// method, and that the caller did join (the runner waits for it:
// testWaitGuest; one worker thread leaves a core for it on two CPUs).
func TestSyncHelpBitwise(t *testing.T) {
	const topK, maxTok = 4, 8
	for _, m := range Methods {
		spec := small
		spec.Method = m
		src := sourceFor(m, spec)
		var layers [2]*Layer
		var engines [2]*Engine
		for i, noHelp := range []bool{true, false} {
			e, err := NewEngine(Config{Threads: 1, MaxTokens: maxTok, TopK: topK, Experts: spec.Experts,
				Hidden: spec.Hidden, Intermediate: spec.Intermediate, SyncHelp: !noHelp, Trace: true, testWaitGuest: !noHelp,
				NoPin: true}) // pinned, the caller may share the worker's CPU and would not join
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			l, err := e.NewLayer(spec, src)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.Close)
			engines[i], layers[i] = e, l
		}
		for _, tokens := range []int{1, 3, maxTok} {
			x, ids, w := RandomBatch(uint64(tokens)+5, tokens, topK, spec.Hidden, spec.Experts)
			ids[len(ids)-1] = ids[0] // a repeated expert
			var got [2][]float32
			for i, l := range layers {
				for via := range 2 {
					out := make([]float32, tokens*spec.Hidden)
					b := &Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}
					var err error
					if via == 0 {
						err = l.Forward(b)
					} else if err = l.Submit(b); err == nil {
						err = engines[i].Sync()
					}
					if err != nil {
						t.Fatalf("%s tok%d: %v", m, tokens, err)
					}
					if got[i] != nil && !slices.Equal(got[i], out) {
						t.Fatalf("%s tok%d: Forward and Submit+Sync differ", m, tokens)
					}
					got[i] = out
				}
			}
			if !slices.Equal(got[0], got[1]) {
				t.Errorf("%s tok%d: output with the caller helping differs from without", m, tokens)
			}
		}
		if tr := engines[0].Trace(); tr.GuestShare != 0 {
			t.Errorf("%s: engine without SyncHelp had a guest in %.0f%% of its tasks", m, 100*tr.GuestShare)
		}
		// every task that needs no AMX tiles had a guest (testWaitGuest); the
		// 1-token ones always qualify
		if tr := engines[1].Trace(); tr.GuestShare == 0 || tr.GuestItems == 0 {
			t.Errorf("%s: the waiting caller joined %.0f%% of the tasks and ran %.1f items in each", m, 100*tr.GuestShare, tr.GuestItems)
		}
	}
}

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
// enough that the hand-off dominates (16 experts, 256 x 256), with and
// without the caller helping. Metrics: ns/op is the whole call; task-ns the
// engine's own time from publication to done; caller-ns the caller's time
// between a Sync's return and the next submit.
func BenchmarkDecodeHandoff(b *testing.B) {
	for _, noHelp := range []bool{false, true} {
		b.Run(fmt.Sprintf("help=%v", !noHelp), func(b *testing.B) {
			spec := small
			spec.Method = AMXINT4
			e := newEngineCfg(b, Config{Threads: 1, MaxTokens: 1, TopK: 8, Experts: spec.Experts, Hidden: spec.Hidden,
				Intermediate: spec.Intermediate, SyncHelp: !noHelp, Trace: true})
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
		})
	}
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
		Intermediate: spec.Intermediate, Trace: true, NoPin: true})
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
