//go:build linux && amd64 && cgo

package hybrid

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ktserve/kt/backend/cuda"
)

// The hand-off of a piecewise decode step: at each MoE layer the piece
// being recorded ends (runbase.Base.CutAhead) and, at every replay, the
// calling thread waits for the layer's copies to host, submits the layer's
// CPU experts and queues on the stream, ahead of the next piece, a
// one-thread kernel that polls a pinned counter (cuda.Stream.WaitHost);
// the next piece is launched at once, and the engine stores the counter's
// next value as the task ends (cpuexperts.Batch.Release), so the GPU goes
// on a bus read after the CPU instead of a graph launch after it. With
// expert deferral the plain hand-off (runbase.Base.Cut) runs instead: the
// deferred task still runs when the layer's immediate one ends, and the
// next piece is launched once the immediate task is done.

// handoff is layer l's plain hand-off between two pieces of a piecewise
// step of n rows (expert deferral): wait for the layer's copies to host,
// run its CPU experts, queue the prefetch of the next MoE layer.
func (g *gpuLink) handoff(l, n int) func() error {
	sn, next, nn := g.pred.take(l) // this step's predictions: layer l's at the step's start, the next layer's
	return func() error {
		var d int
		var pending bool
		if f := g.def; f != nil {
			if l == f.first && f.pending {
				_ = g.x.eng.Sync() // a step that failed midway left a deferred task
			}
			d, pending = f.begin(l)
		}
		t0, t1, err := g.handoffWait(l, n, sn)
		if err != nil {
			return err
		}
		err = g.runCPU(l, n, d, pending)
		if g.timing != nil {
			g.timing.add(l, t0, t1, time.Now())
		}
		if err == nil && nn > 0 {
			err = g.prefetch(atNext, next, nn)
		}
		return err
	}
}

// handoffWait is a hand-off's first part: the prefetch of layer l's
// prediction at the step's start (sn tokens; 0: none; the first MoE layer
// only), then the wait for the layer's copies to host; with
// settings.HybridTiming it scores the layer's prefetched prediction and
// returns when the hand-off began (t0) and when the copies were in (t1).
func (g *gpuLink) handoffWait(l, n, sn int) (t0, t1 time.Time, err error) {
	if g.timing != nil {
		t0 = time.Now()
	}
	if sn > 0 {
		if err := g.prefetch(atStart, l, sn); err != nil {
			return t0, t1, err
		}
	}
	if err := spin(g.ev); err != nil {
		return t0, t1, err
	}
	if g.timing != nil {
		g.scorePrediction(l, n) // before the deferral split rewrites the picks
		t1 = time.Now()
	}
	return t0, t1, nil
}

// handoffAhead is layer l's hand-off in the two parts of
// runbase.Base.CutAhead: after (handoffWait: the first MoE layer's
// prefetch of its prediction at the step's start, then the wait for the
// layer's copies) submits its CPU experts with the counter's next value
// for the engine to store as the task ends, reads the next layer's
// prediction and queues the next piece's wait for that value; finish
// waits for the task, stores the value (again, or for a task that failed)
// and queues the next layer's prefetch. The next layer's prediction is
// read in after: once the next piece is launched, its slot's event stands
// for that piece's record of it, which waits for the counter.
func (g *gpuLink) handoffAhead(l, n int) (after, finish func() error) {
	sn, next, nn := g.pred.take(l)
	var t0, t1 time.Time
	after = func() error {
		var err error
		if t0, t1, err = g.handoffWait(l, n, sn); err != nil {
			return err
		}
		b, v := g.batchFor(n), g.seq+1
		b.Release, b.ReleaseValue = g.ctr, v // the engine lets the piece go on as the task ends
		err = g.x.layers[l].Submit(b)
		b.Release = nil // the batch is reused by op-by-op steps
		if err != nil {
			return err
		}
		g.seq = v   // the engine or finish stores it: the next hand-off waits for the one after
		if nn > 0 { // while the task runs: the GPU computed it after the layer's copies
			var ids []int32
			if ids, err = g.predicted(atNext, nn); err == nil {
				g.pred.held = append(g.pred.held[:0], ids...)
			}
		}
		if err == nil {
			err = g.s.WaitHost(g.flag, 0, v)
		}
		if err != nil {
			_ = g.x.eng.Sync()
			g.release()
			return err
		}
		return nil
	}
	finish = func() error {
		err := g.x.eng.Sync()
		var t2 time.Time
		if g.timing != nil {
			t2 = time.Now()
		}
		g.release() // the outputs are in: the piece may read them
		if err == nil && nn > 0 {
			g.prefetchIDs(next, g.pred.held)
		}
		if g.timing != nil {
			g.timing.add(l, t0, t1, t2)
		}
		return err
	}
	return after, finish
}

// aheadSetup allocates the ahead hand-off's pinned counter and queues a
// wait that passes at once, which loads WaitHost's kernel now, while
// nothing waits on this thread.
func (g *gpuLink) aheadSetup() error {
	f, err := g.be.Device().AllocHost(64)
	if err != nil {
		return fmt.Errorf("hybrid step: hand-off counter: %w", err)
	}
	ctr := &cuda.HostSlice[uint32](f)[0]
	*ctr = 0 // g.seq's start: pinned memory comes uninitialised
	if err := g.s.WaitHost(f, 0, 0); err == nil {
		err = g.s.Synchronize()
	}
	if err != nil {
		_ = f.Free()
		return fmt.Errorf("hybrid step: hand-off counter wait: %w", err)
	}
	g.flag, g.ctr = f, ctr
	return nil
}

// release stores the last ahead hand-off's value into the counter: the
// piece queued behind it goes on.
func (g *gpuLink) release() { atomic.StoreUint32(g.ctr, g.seq) }
