package modeltest

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/internal/stepper"
	"github.com/ktserve/kt/model"
)

// FakeGraphs is the CPU backend with backend.GraphBackend's semantics, so
// the decode graph path of runbase (padding to buckets, capture after a
// warm-up step, replay, re-capture when the epoch changes) runs on CI:
// CaptureStep records the function without running it and ReplayStep runs
// it again for the step set last, as a CUDA graph replays its kernels,
// which read the step from the backend's buffers.
type FakeGraphs struct {
	*cpu.Backend
	// Epoch is what GraphEpoch reports; a test bumps it to force
	// re-captures.
	Epoch    uint64
	Captures int
	log      []float32
}

var _ backend.GraphBackend = (*FakeGraphs)(nil)

type fakeGraph struct {
	fn   func()
	dead bool
}

func (g *fakeGraph) Destroy() error { g.dead = true; return nil }

// ReserveStep implements backend.GraphBackend (nothing to size).
func (f *FakeGraphs) ReserveStep(tokens, seqs, pages int) error { return nil }

// CaptureStep implements backend.GraphBackend: fn is kept, not run.
func (f *FakeGraphs) CaptureStep(fn func()) (backend.StepGraph, error) {
	f.Captures++
	return &fakeGraph{fn: fn}, nil
}

// ReplayStep implements backend.GraphBackend: the recorded ops run again.
func (f *FakeGraphs) ReplayStep(g backend.StepGraph) {
	fg := g.(*fakeGraph)
	if fg.dead {
		panic("modeltest: replay of a destroyed graph")
	}
	fg.fn()
}

// GraphEpoch implements backend.GraphBackend.
func (f *FakeGraphs) GraphEpoch() uint64 { return f.Epoch }

// ReadPinned implements backend.GraphBackend with Read into a buffer that
// is reused.
func (f *FakeGraphs) ReadPinned(t backend.Tensor, rows int) ([]float32, error) {
	m := rows * t.Shape()[len(t.Shape())-1]
	if cap(f.log) < m {
		f.log = make([]float32, m)
	}
	return f.log[:m], f.Read(f.log[:m], t, rows)
}

// GraphDecodeIdentical runs the same prompts and greedy decode steps of 1,
// 2, 3 (padded to 4) and 4 sequences on a runner whose decode steps go
// through the graph path (on FakeGraphs) and on one with graphs disabled,
// and checks every logits row is bit-identical, that steps were captured
// and replayed, and that bumping the epoch re-captures.
func GraphDecodeIdentical[R model.Runner](t *testing.T, fixture string, load func(dir string, o arch.Options) (R, error)) {
	t.Helper()
	GraphDecodeIdenticalIn(t, FixtureDir(fixture), ReadRef(t, fixture), load)
}

// GraphDecodeIdenticalIn is GraphDecodeIdentical on the checkpoint in dir
// with the prompts of cases: for a synthetic checkpoint without a
// reference.
func GraphDecodeIdenticalIn[R model.Runner](t *testing.T, dir string, cases []Case, load func(dir string, o arch.Options) (R, error)) {
	t.Helper()
	open := func(disable bool) (R, *FakeGraphs) {
		be := &FakeGraphs{Backend: cpu.New(cpu.Options{Threads: 2})}
		r, err := load(dir, arch.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, Backend: be, DisableCUDAGraph: disable})
		if err != nil {
			be.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); be.Close() })
		return r, be
	}
	ref, _ := open(true)
	gr, fake := open(false)
	if s, _ := arch.GraphStatsOf(ref); s.Off == "" {
		t.Fatalf("graphs disabled, yet stats say %s", s)
	}
	sp := stepper.New(ref, gr)
	step := func(what string, slots []int, prompt map[int][]int32) {
		t.Helper()
		b, rows := sp.Run(t, what, slots, prompt)
		RequireIdentical(t, what, rows[1], rows[0])
		sp.Advance(b, rows[0])
	}
	for s := 0; s < 4; s++ {
		p := cases[s%len(cases)].PromptIDs
		step(fmt.Sprintf("prefill slot %d", s), []int{s}, map[int][]int32{s: p[:min(len(p), 20+s)]})
	}
	for _, bs := range []int{1, 2, 3, 4} {
		for i := 0; i < 3; i++ {
			step(fmt.Sprintf("decode %d sequences, step %d", bs, i), []int{0, 1, 2, 3}[:bs], nil)
		}
	}
	st, _ := arch.GraphStatsOf(gr)
	// buckets 1, 2 and 4 (3 pads to 4): a warm-up step, then capture and
	// replay, then replays; 4 sequences find bucket 4 captured
	if st.Off != "" || st.Captures != 3 || st.Replays != 9 || fake.Captures != 3 {
		t.Fatalf("graph stats %s (backend captures %d), want 3 captured, 9 replayed", st, fake.Captures)
	}
	fake.Epoch++ // a buffer moved: the 4-sequence graph must be captured again
	for i := 0; i < 3; i++ {
		step(fmt.Sprintf("decode 4 sequences after the epoch changed, step %d", i), []int{0, 1, 2, 3}, nil)
	}
	if st, _ = arch.GraphStatsOf(gr); st.Captures != 4 || st.Replays != 11 {
		t.Fatalf("after the epoch changed: graph stats %s, want 4 captured, 11 replayed", st)
	}
	// a mixed step (prefill + decode) runs op by op between replays
	sp.Free(3)
	step("mixed step", []int{0, 3}, map[int][]int32{3: cases[1].PromptIDs[:7]})
	step("decode after the mixed step", []int{0, 1, 2, 3}, nil)
	t.Logf("%s: %s", filepath.Base(dir), st)
}
