//go:build cgo

package cuda

import (
	"errors"
	"fmt"

	"github.com/ktserve/kt/backend"
)

var _ backend.GraphBackend = (*Backend)(nil)

// ReserveStep implements backend.GraphBackend: the step metadata buffers
// are sized for steps of up to tokens rows, seqs sequences and pages page
// ids, so SetStep never moves them for such steps (a captured graph reads
// them at fixed addresses).
func (b *Backend) ReserveStep(tokens, seqs, pages int) error {
	if tokens < 1 || seqs < 1 || pages < 0 {
		return fmt.Errorf("cuda: ReserveStep(%d tokens, %d sequences, %d pages)", tokens, seqs, pages)
	}
	if err := b.ensureMeta(tokens, seqs+1, pages); err != nil {
		return fmt.Errorf("cuda: step metadata: %w", err)
	}
	return nil
}

// CaptureStep implements backend.GraphBackend with Capture.
func (b *Backend) CaptureStep(fn func()) (backend.StepGraph, error) {
	epoch := b.epoch
	g, err := b.Capture(fn)
	if err != nil {
		return nil, err
	}
	if b.epoch != epoch {
		// something regrew while recording (it would have had to
		// synchronise, which fails a capture; kept as a guard)
		g.Destroy()
		return nil, errors.New("cuda: a scratch buffer moved during capture")
	}
	return g, nil
}

// CaptureSegments records the ops fn queues as a sequence of graphs: each
// call of cut (which fn makes between ops) ends one graph and begins the
// next, so that the caller can run host work between their replays (the
// hybrid step's CPU experts, runbase.Base.Cut). ReplayStep replays each.
// After a failed cut every later cut fails too (the work queued meanwhile
// is still recorded, then discarded, so none of it runs): fn should stop
// and return. Run the same ops once eagerly first, as for CaptureStep.
func (b *Backend) CaptureSegments(fn func(cut func() error)) ([]backend.StepGraph, error) {
	if err := b.Sync(); err != nil {
		return nil, err
	}
	epoch := b.epoch
	if err := b.s.BeginCapture(); err != nil {
		return nil, err
	}
	var segs []backend.StepGraph
	var first error
	capturing := true
	end := func() {
		ferr := b.err
		if ferr == nil {
			ferr = first
		}
		g, err := b.s.EndCapture(ferr)
		capturing = false
		switch {
		case err != nil && first == nil:
			first = err
		case err == nil:
			segs = append(segs, g)
		}
	}
	cut := func() error {
		if first != nil {
			return first
		}
		end()
		if err := b.s.BeginCapture(); err != nil {
			if first == nil {
				first = err
			}
			return first
		}
		capturing = true
		return first
	}
	fn(cut)
	if capturing {
		end()
	}
	b.err = nil
	if first == nil && b.epoch != epoch {
		first = errors.New("cuda: a scratch buffer moved during capture")
	}
	if first != nil {
		for _, g := range segs {
			g.Destroy()
		}
		return nil, first
	}
	return segs, nil
}

// ReplayStep implements backend.GraphBackend.
func (b *Backend) ReplayStep(g backend.StepGraph) {
	cg, ok := g.(*Graph)
	if !ok || cg == nil || cg.e == nil {
		b.fail("ReplayStep: not a live graph of the cuda backend")
		return
	}
	b.Replay(cg)
}

// GraphEpoch implements backend.GraphBackend: it counts the times a buffer
// that ops pass to kernels (MatMul scratch, MoE scratch, step metadata)
// was reallocated.
func (b *Backend) GraphEpoch() uint64 { return b.epoch }

// ReadPinned implements backend.GraphBackend: one async copy into a pinned
// buffer (grown on first use of a larger read) and a stream sync.
func (b *Backend) ReadPinned(t backend.Tensor, rows int) ([]float32, error) {
	ct := b.t(t, "ReadPinned")
	if ct == nil {
		return nil, b.Sync()
	}
	m := rows * ct.cols()
	src := b.f32(t, m, "ReadPinned")
	if src == nil || !b.ok() || m <= 0 {
		return nil, b.Sync()
	}
	need := int64(m) * 4
	if b.readHost == nil || b.readHost.Size < need {
		if err := b.s.Synchronize(); err != nil {
			b.check("ReadPinned", err)
			return nil, b.Sync()
		}
		if b.readHost != nil {
			b.readHost.Free()
			b.readHost = nil
		}
		h, err := b.d.AllocHost(need)
		if err != nil {
			b.check("ReadPinned", err)
			return nil, b.Sync()
		}
		b.readHost = h
	}
	if !b.check("ReadPinned", b.s.CopyDtoH(b.readHost, 0, src.buf, need)) {
		return nil, b.Sync()
	}
	if err := b.Sync(); err != nil {
		return nil, err
	}
	return HostSlice[float32](b.readHost)[:m:m], nil
}
