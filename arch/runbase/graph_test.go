package runbase

import (
	"errors"
	"slices"
	"testing"

	"github.com/ktserve/kt/backend"
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
