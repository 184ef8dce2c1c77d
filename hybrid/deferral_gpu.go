//go:build linux && amd64 && cgo

package hybrid

import (
	"fmt"

	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/moe/cpuexperts"
)

// Expert deferral in the hybrid step (deferral.go says what it computes).

// pinSlot is one slot of pinned buffers of the hybrid step with expert
// deferral: a MoE layer's input rows, ids (the immediate picks), weights,
// deferred picks and the output its immediate task completes (which the
// previous MoE layer's deferred task wrote first).
type pinSlot struct {
	x, out, ids, wts, defIDs *cuda.HostBuffer
	xs, outs, ws             []float32
	is, ds                   []int32
	owned                    bool // x, out, ids, wts allocated for the slot (slot 1), freed by close
}

// setDeferral turns expert deferral on: slot 0 is the step's pinned
// buffers, slot 1 a second set, each with a buffer for the deferred
// picks. Op by op and in piecewise steps a layer's deferred task runs on
// while the GPU runs the next layer's work.
func (g *gpuLink) setDeferral(f *deferral) error {
	T := g.maxTok
	var err error
	alloc := func(n int) *cuda.HostBuffer {
		if err != nil {
			return nil
		}
		var h *cuda.HostBuffer
		h, err = g.be.Device().AllocHost(int64(n) * 4)
		return h
	}
	g.slots[0] = pinSlot{x: g.pinX, out: g.pinOut, ids: g.pinIDs, wts: g.pinWts, defIDs: alloc(T * g.k)}
	g.slots[1] = pinSlot{x: alloc(T * g.hid), out: alloc(T * g.hid), ids: alloc(T * g.k), wts: alloc(T * g.k), defIDs: alloc(T * g.k), owned: true}
	g.def = f // close frees what was allocated
	if err != nil {
		return fmt.Errorf("hybrid step: pinned buffers for expert deferral, %d tokens: %w", T, err)
	}
	for i := range g.slots {
		sl := &g.slots[i]
		sl.xs, sl.outs, sl.ws = cuda.HostSlice[float32](sl.x), cuda.HostSlice[float32](sl.out), cuda.HostSlice[float32](sl.wts)
		sl.is, sl.ds = cuda.HostSlice[int32](sl.ids), cuda.HostSlice[int32](sl.defIDs)
	}
	return nil
}

// slot returns the pinned buffers of layer l: its slot with deferral,
// else the step's buffers.
func (g *gpuLink) slot(l int) (x, out, ids, wts *cuda.HostBuffer) {
	if g.def == nil {
		return g.pinX, g.pinOut, g.pinIDs, g.pinWts
	}
	sl := &g.slots[g.def.order[l]&1]
	return sl.x, sl.out, sl.ids, sl.wts
}

// deferredRun is the CPU work of layer l with expert
// deferral, once the layer's copies into its slot have landed: the
// immediate picks into the slot's output, on top of the previous MoE
// layer's deferred output when one is pending (FIFO: that task finishes
// first), then the deferred picks into the other slot's output for the
// next MoE layer. It returns once the immediate task is done; the
// deferred task runs on while the GPU runs the next layer's work.
func (g *gpuLink) deferredRun(l, n, d int, pending bool) error {
	f := g.def
	s := f.order[l] & 1
	sl, next := &g.slots[s], &g.slots[1-s]
	nk := n * g.k
	b := &g.x.batch
	*b = cpuexperts.Batch{Tokens: n, TopK: g.k, X: sl.xs[:n*g.hid], IDs: sl.is[:nk], Weights: sl.ws[:nk],
		Out: sl.outs[:n*g.hid], Incremental: pending}
	if d > 0 {
		f.split(sl.is[:nk], sl.ws[:nk], n, d)
		copy(sl.is[:nk], f.imm[:nk])
		copy(sl.ds[:nk], f.def[:nk])
	}
	if err := g.x.layers[l].Submit(b); err != nil {
		return err
	}
	f.pending = false
	if d == 0 {
		return g.x.eng.Sync()
	}
	g.dbatch = cpuexperts.Batch{Tokens: n, TopK: g.k, X: sl.xs[:n*g.hid], IDs: sl.ds[:nk], Weights: sl.ws[:nk],
		Out: next.outs[:n*g.hid]}
	if err := g.x.layers[l].Submit(&g.dbatch); err != nil {
		_ = g.x.eng.Sync()
		return err
	}
	f.pending = true
	return g.x.eng.Wait(1)
}
