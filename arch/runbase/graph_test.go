package runbase

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tp"
)

func TestBuckets(t *testing.T) {
	for _, c := range []struct {
		max  int
		want []int
	}{
		{0, nil},
		{1, []int{1}},
		{2, []int{1, 2}},
		{3, []int{1, 2, 3}},
		{4, []int{1, 2, 4}},
		{6, []int{1, 2, 4, 6}},
		{8, []int{1, 2, 4, 8}},
		{20, []int{1, 2, 4, 8, 16, 20}},
		{32, []int{1, 2, 4, 8, 16, 24, 32}},
	} {
		if got := Buckets(c.max); !slices.Equal(got, c.want) {
			t.Errorf("Buckets(%d) = %v, want %v", c.max, got, c.want)
		}
		g := graphState{buckets: Buckets(c.max)}
		for n := 1; n <= c.max; n++ {
			if b := g.bucket(n); b < n || b > c.max || !slices.Contains(c.want, b) {
				t.Errorf("max %d: bucket(%d) = %d", c.max, n, b)
			}
		}
		if b := g.bucket(c.max + 1); b != 0 {
			t.Errorf("max %d: bucket(%d) = %d, want 0 (op by op)", c.max, c.max+1, b)
		}
	}
}

// fakePieces records "ops" as strings: while capturing they go into the
// graph being recorded, a replay appends a graph's ops to the log.
type fakePieces struct {
	backend.GraphBackend // not called
	log                  []string
	cur                  []string
	capturing            bool
	failCut              int // the cut (1-based) that fails; 0: none
	extra                bool
	graphs               []*fakePiece
}

type fakePiece struct {
	ops  []string
	dead bool
}

func (p *fakePiece) Destroy() error { p.dead = true; return nil }

func (f *fakePieces) op(name string) {
	if f.capturing {
		f.cur = append(f.cur, name)
		return
	}
	f.log = append(f.log, name)
}

func (f *fakePieces) CaptureSegments(fn func(cut func() error)) ([]backend.StepGraph, error) {
	var out []backend.StepGraph
	cuts := 0
	end := func() {
		g := &fakePiece{ops: f.cur}
		f.graphs = append(f.graphs, g)
		out = append(out, g)
		f.cur = nil
	}
	f.capturing = true
	fn(func() error {
		cuts++
		if cuts == f.failCut {
			return errors.New("cut refused")
		}
		end()
		return nil
	})
	end()
	f.capturing = false
	if f.extra {
		end()
	}
	return out, nil
}

func (f *fakePieces) ReplayStep(g backend.StepGraph) {
	f.log = append(f.log, g.(*fakePiece).ops...)
}

func TestPiecewiseCaptureReplay(t *testing.T) {
	after := func(f *fakePieces, name string, err error) func() error {
		return func() error { f.log = append(f.log, name); return err }
	}
	// queueAhead is a step of 3 pieces: 2 hand-offs, each as after and
	// finish (CutAhead) where finish is set (its name, and its error)
	queueAhead := func(g *graphState, f *fakePieces, err1 error, finish [2]string, ferr error) func() error {
		fin := func(i int) func() error {
			if finish[i] == "" {
				return nil
			}
			return after(f, finish[i], ferr)
		}
		return func() error {
			f.op("attn0")
			f.op("router0")
			if err := g.cut(after(f, "cpu0", err1), fin(0)); err != nil {
				return err
			}
			f.op("add0")
			f.op("attn1")
			if err := g.cut(after(f, "cpu1", nil), fin(1)); err != nil {
				return err
			}
			f.op("add1")
			f.op("head")
			return nil
		}
	}
	queue := func(g *graphState, f *fakePieces, err1 error) func() error {
		return queueAhead(g, f, err1, [2]string{}, nil)
	}
	t.Run("replay order", func(t *testing.T) {
		f, g := &fakePieces{}, &graphState{}
		segs, err := g.capturePieces(f, queue(g, f, nil))
		if err != nil {
			t.Fatal(err)
		}
		if g.cut != nil {
			t.Error("Cut still set after the capture")
		}
		if len(f.log) != 0 {
			t.Fatalf("capture ran %v", f.log)
		}
		sg := &stepGraph{segs: segs}
		for range 2 {
			f.log = nil
			if err := sg.replay(f); err != nil {
				t.Fatal(err)
			}
			want := []string{"attn0", "router0", "cpu0", "add0", "attn1", "cpu1", "add1", "head"}
			if !slices.Equal(f.log, want) {
				t.Fatalf("replay ran %v, want %v", f.log, want)
			}
		}
		sg.destroy()
		for i, p := range f.graphs {
			if !p.dead {
				t.Errorf("graph %d not destroyed", i)
			}
		}
		if sg.live() {
			t.Error("destroyed bucket still live")
		}
	})
	// CutAhead: a hand-off's finish runs once the next piece is launched
	// (also after the last); a finish error stops the step there
	for _, c := range []struct {
		name   string
		finish [2]string
		ferr   error
		want   []string
	}{
		{"ahead, first hand-off", [2]string{"done0", ""}, nil,
			[]string{"attn0", "router0", "cpu0", "add0", "attn1", "done0", "cpu1", "add1", "head"}},
		{"ahead, both", [2]string{"done0", "done1"}, nil,
			[]string{"attn0", "router0", "cpu0", "add0", "attn1", "done0", "cpu1", "add1", "head", "done1"}},
		{"ahead, finish error", [2]string{"done0", "done1"}, errors.New("task failed"),
			[]string{"attn0", "router0", "cpu0", "add0", "attn1", "done0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, g := &fakePieces{}, &graphState{}
			segs, err := g.capturePieces(f, queueAhead(g, f, nil, c.finish, c.ferr))
			if err != nil {
				t.Fatal(err)
			}
			err = (&stepGraph{segs: segs}).replay(f)
			if (err != nil) != (c.ferr != nil) {
				t.Fatalf("replay error %v, want %v", err, c.ferr)
			}
			if !slices.Equal(f.log, c.want) {
				t.Fatalf("replay ran %v, want %v", f.log, c.want)
			}
		})
	}
	t.Run("hand-off error stops the step", func(t *testing.T) {
		f, g := &fakePieces{}, &graphState{}
		segs, err := g.capturePieces(f, queue(g, f, errors.New("engine failed")))
		if err != nil {
			t.Fatal(err)
		}
		err = (&stepGraph{segs: segs}).replay(f)
		if err == nil || err.Error() != "engine failed" {
			t.Fatalf("replay error %v", err)
		}
		if want := []string{"attn0", "router0", "cpu0"}; !slices.Equal(f.log, want) {
			t.Fatalf("replay ran %v, want %v", f.log, want)
		}
	})
	for _, c := range []struct {
		name    string
		failCut int
		extra   bool
	}{{"failed cut", 2, false}, {"graph count mismatch", 0, true}} {
		t.Run(c.name, func(t *testing.T) {
			f, g := &fakePieces{failCut: c.failCut, extra: c.extra}, &graphState{}
			if _, err := g.capturePieces(f, queue(g, f, nil)); err == nil {
				t.Fatal("capture succeeded")
			}
			for i, p := range f.graphs {
				if !p.dead {
					t.Errorf("graph %d of a failed capture not destroyed", i)
				}
			}
			if g.cut != nil {
				t.Error("Cut still set after the capture")
			}
		})
	}
	t.Run("one graph", func(t *testing.T) {
		f := &fakePieces{}
		g := &fakePiece{ops: []string{"all"}}
		if err := (&stepGraph{g: g}).replay(f); err != nil || !slices.Equal(f.log, []string{"all"}) {
			t.Fatalf("replay: %v, ran %v", err, f.log)
		}
	})
	t.Run("Cut outside a capture", func(t *testing.T) {
		b := &Base{}
		if b.CapturingPieces() {
			t.Error("CapturingPieces outside a capture")
		}
		if err := b.Cut(func() error { return nil }); err == nil {
			t.Error("Cut outside a capture succeeded")
		}
		b.gr.off = "graphs off for the test"
		if ok, why := b.PiecewiseGraphs(); ok || why != b.gr.off {
			t.Errorf("PiecewiseGraphs with graphs off = %v, %q", ok, why)
		}
	})
}

// fakeGraph is a captured graph that records its destruction.
type fakeGraph struct{ dead bool }

func (g *fakeGraph) Destroy() error { g.dead = true; return nil }

// agreeing is the host agreement of n ranks (goroutines): AND of their
// values, as cuda.SameDeviceGroup's AllAgree.
type agreeing struct {
	bar  *tp.Barrier
	vals []bool
}

func (a *agreeing) agree(rank int) func(bool) bool {
	return func(ok bool) bool {
		a.vals[rank] = ok
		if err := a.bar.Wait(); err != nil {
			panic(err)
		}
		all := true
		for _, v := range a.vals {
			all = all && v
		}
		if err := a.bar.Wait(); err != nil {
			panic(err)
		}
		return all
	}
}

// TestGraphPathAgreement steps two ranks' decode graph decisions together
// (nextAction, agreeCaptured) through the scenarios where they would part:
// a buffer that moved on one rank, a capture that failed on one rank. The
// ranks must always take the same path; alone (no agreement), a rank's
// path is the single-rank one.
func TestGraphPathAgreement(t *testing.T) {
	type rankState struct {
		g     graphState
		sg    stepGraph
		epoch uint64
	}
	// step runs one decode step on every rank: moved bumps those ranks'
	// epochs first, failCapture fails those ranks' captures. It returns
	// each rank's action and the captures' outcome.
	step := func(ranks []*rankState, moved, failCapture map[int]bool) ([]graphAction, []error) {
		a := &agreeing{bar: tp.NewBarrier(len(ranks)), vals: make([]bool, len(ranks))}
		acts, errs := make([]graphAction, len(ranks)), make([]error, len(ranks))
		var wg sync.WaitGroup
		for r, st := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				agree := a.agree(r)
				if moved[r] {
					st.epoch++
				}
				acts[r] = st.g.nextAction(&st.sg, st.epoch, agree)
				switch acts[r] {
				case runEager:
					st.sg.warm = true
				case captureGraph:
					var err error
					if failCapture[r] {
						err = errors.New("capture failed")
					} else {
						st.sg.g = &fakeGraph{}
					}
					if err = agreeCaptured(&st.sg, err, agree); err == nil {
						st.sg.epoch = st.epoch
					} else {
						st.sg.failed = true
					}
					errs[r] = err
				}
			}()
		}
		wg.Wait()
		return acts, errs
	}
	same := func(t *testing.T, what string, acts []graphAction, want graphAction) {
		t.Helper()
		for r, a := range acts {
			if a != want {
				t.Fatalf("%s: rank %d's action %d, want %d (all: %v)", what, r, a, want, acts)
			}
		}
	}
	newRanks := func(n int) []*rankState {
		rs := make([]*rankState, n)
		for i := range rs {
			rs[i] = &rankState{}
		}
		return rs
	}
	t.Run("warm-up, capture, replay", func(t *testing.T) {
		rs := newRanks(2)
		acts, _ := step(rs, nil, nil)
		same(t, "first step", acts, runEager)
		acts, errs := step(rs, nil, nil)
		same(t, "second step", acts, captureGraph)
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("captures failed: %v", errs)
		}
		acts, _ = step(rs, nil, nil)
		same(t, "third step", acts, replayGraph)
	})
	t.Run("a buffer moved on one rank", func(t *testing.T) {
		rs := newRanks(2)
		step(rs, nil, nil)
		step(rs, nil, nil)
		old := rs[0].sg.g.(*fakeGraph)
		acts, _ := step(rs, map[int]bool{1: true}, nil)
		same(t, "after the move", acts, runEager)
		if !old.dead || rs[0].sg.live() {
			t.Fatal("rank 0 kept a graph rank 1 no longer has")
		}
		acts, _ = step(rs, nil, nil)
		same(t, "the step after", acts, captureGraph)
		acts, _ = step(rs, nil, nil)
		same(t, "then", acts, replayGraph)
	})
	t.Run("a capture failed on one rank", func(t *testing.T) {
		rs := newRanks(2)
		step(rs, nil, nil)
		acts, errs := step(rs, nil, map[int]bool{0: true})
		same(t, "capture", acts, captureGraph)
		if errs[0] == nil || errs[1] == nil {
			t.Fatalf("capture outcomes %v: every rank must fail when one does", errs)
		}
		if rs[1].sg.live() {
			t.Fatal("rank 1 kept the graph of a capture rank 0 failed")
		}
		for range 2 {
			acts, _ = step(rs, nil, nil)
			same(t, "after the failure", acts, runEager)
		}
	})
	t.Run("one rank", func(t *testing.T) {
		alone := func(ok bool) bool { return ok }
		var g graphState
		sg := &stepGraph{}
		want := []graphAction{runEager, captureGraph, replayGraph}
		for i, w := range want {
			a := g.nextAction(sg, 0, alone)
			if a != w {
				t.Fatalf("step %d: action %d, want %d", i, a, w)
			}
			switch a {
			case runEager:
				sg.warm = true
			case captureGraph:
				sg.g = &fakeGraph{}
			}
		}
		g.eagerPad = true
		sg.destroy()
		if a := g.nextAction(sg, 0, alone); a != runEager {
			t.Fatalf("EagerGraphSteps: action %d, want op by op", a)
		}
	})
}
