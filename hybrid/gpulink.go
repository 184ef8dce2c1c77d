//go:build linux && amd64 && cgo

package hybrid

import (
	"fmt"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/tensor"
)

// gpuLink is the hybrid step's bridge between the GPU backend and the CPU
// expert engine: pinned host buffers at fixed addresses for one step's
// layer input, router ids and weights and the experts' output, which the
// GPU writes and reads through small copy kernels (cuda.Device.CopyHost).
//
// Op by op (prefill and mixed steps, a decode bucket's first step, every
// step where CUDA graphs are off), start queues the copies of the layer's
// input rows, ids and weights to the pinned buffers, an event after them
// and the GPU experts of a split layer, spins on the event, and runs the
// layer's CPU experts on the calling thread; join queues the copy back.
//
// Piecewise graphs (decode steps, while runbase records them): start
// queues the copies and an event record node (the point the CPU waits
// for) and the GPU experts of a split layer; the model queues its shared
// expert; join ends the piece there with the layer's hand-off (handoff.go)
// and begins the next piece with the copy back and the add. A replay is a
// loop of (MoE layers + 1) graph launches, the CPU experts on the calling
// thread between them.
type gpuLink struct {
	be             *cuda.Backend
	s              *cuda.Stream
	x              *engine
	rb             *runbase.Base
	hid, k, maxTok int
	pinX, pinOut   *cuda.HostBuffer // f32 [maxTok][hid]
	pinIDs, pinWts *cuda.HostBuffer // i32 / f32 [maxTok][k]
	xs, outs, wts  []float32
	ids            []int32
	ev             *cuda.Event // recorded after a layer's copies to host
	piece          bool        // decode steps may be captured piecewise (graphSetup)
	// GPU experts (Options.GPUExperts), per model layer: the GPU's share of
	// the layer (nil: none), whether all its experts are on the GPU, and a
	// device buffer for the CPU's share, added to the GPU's.
	gpuExp  []*backend.Experts
	allGPU  []bool
	nGPU    []int
	experts int
	cpuPart backend.Tensor // f32 [maxTok][hid]; nil when no layer is split
	// expert deferral (deferral_gpu.go): two slots of pinned buffers, used
	// by the MoE layers in turn, so that a layer's deferred task may still
	// read its slot while the next layer's copies fill the other
	def    *deferral
	slots  [2]pinSlot
	dbatch cpuexperts.Batch // the deferred task's batch
	timing *handoffTiming   // settings.HybridTiming: hand-off times; nil when off
	// layerwise prefill (--kt-gpu-prefill-token-threshold; nil when off)
	// and whether the step begun last takes it
	lw      *layerwise
	lwStep  bool
	pred    *predictor // next-layer expert prefetch (nil when off; predOff says why)
	predOff string
	// ahead hand-offs (handoff.go): the pinned counter the next piece
	// waits for (ctr, the uint32 at byte 0 of flag) and the value of the
	// last hand-off
	flag *cuda.HostBuffer
	ctr  *uint32
	seq  uint32
}

// newGPULink sets up the hybrid step of engine x over layers (nil for a
// dense one) on rb's GPU backend; timed turns the hand-off timing on.
func newGPULink(rb *runbase.Base, x *engine, layers []*Weights, timed bool) (*gpuLink, error) {
	nLayers := len(layers)
	be, ok := rb.BE.(*cuda.Backend)
	if !ok {
		return nil, fmt.Errorf("the model runs on %s: the hybrid step needs the CUDA backend or the CPU", rb.BE.Name())
	}
	T := rb.Opts.MaxBatchTokens
	g := &gpuLink{be: be, s: be.Stream(), x: x, hid: x.hid, k: x.k, maxTok: T, rb: rb, piece: true,
		gpuExp: make([]*backend.Experts, nLayers), allGPU: make([]bool, nLayers), nGPU: make([]int, nLayers)}
	split := false
	for l, w := range layers {
		if w == nil {
			continue
		}
		g.experts = len(w.Gate)
		if w.NGPU > 0 {
			// the GPU runs this rank's share (a layer wholly on the
			// GPUs: also an empty one, which writes zeros)
			g.nGPU[l] = w.NGPU
			g.allGPU[l] = w.NGPU == len(w.Gate)
			if w.NShare > 0 || g.allGPU[l] {
				g.gpuExp[l] = &w.OnGPU
			}
			split = split || (!g.allGPU[l] && w.NShare > 0)
		}
	}
	var err error
	if split {
		if g.cpuPart, err = be.Alloc(tensor.F32, T, g.hid); err != nil {
			return nil, fmt.Errorf("hybrid step: buffer for the CPU experts' share: %w", err)
		}
	}
	if g.ev, err = be.Device().NewEvent(false); err != nil {
		return nil, fmt.Errorf("hybrid step: %w", err)
	}
	alloc := func(n int) *cuda.HostBuffer {
		if err != nil {
			return nil
		}
		var h *cuda.HostBuffer
		h, err = be.Device().AllocHost(int64(n) * 4)
		return h
	}
	g.pinX, g.pinOut = alloc(T*g.hid), alloc(T*g.hid)
	g.pinIDs, g.pinWts = alloc(T*g.k), alloc(T*g.k)
	if err != nil {
		g.close()
		return nil, fmt.Errorf("hybrid step: pinned buffers for %d tokens: %w", T, err)
	}
	g.xs, g.outs = cuda.HostSlice[float32](g.pinX), cuda.HostSlice[float32](g.pinOut)
	g.ids, g.wts = cuda.HostSlice[int32](g.pinIDs), cuda.HostSlice[float32](g.pinWts)
	if err := g.aheadSetup(); err != nil {
		g.close()
		return nil, err
	}
	first, _ := order(layers)
	if g.pred, err = newPredictor(g); err != nil {
		g.close()
		return nil, err
	}
	if timed {
		g.timing = newHandoffTiming(nLayers, first)
	}
	return g, nil
}

// graphSetup asks runbase for piecewise decode graphs. It returns why the
// hybrid step runs op by op instead ("" when graphs are on).
func (g *gpuLink) graphSetup(rb *runbase.Base) (off string) {
	if ok, why := rb.PiecewiseGraphs(); !ok {
		g.piece = false
		return "hybrid step op by op (" + why + ")"
	}
	return ""
}

// pieceStep reports whether the ops queued now are recorded into a
// piecewise step (the piecewise form's start and join apply).
func (g *gpuLink) pieceStep() bool { return g.piece && g.rb.CapturingPieces() }

// graphForm says how decode steps run, for Path.
func (g *gpuLink) graphForm() string {
	if !g.piece {
		return "decode steps op by op"
	}
	resume := "the next piece launched before the CPU experts end, held by a kernel polling a pinned counter the engine stores as they do"
	if g.def != nil {
		resume = "the next piece launched once the CPU experts end (expert deferral)"
	}
	return "decode steps may run as piecewise CUDA graphs (one per stretch between MoE hand-offs; CPU experts on this thread between launches, waiting on an event node after the layer's copies; " + resume + ")"
}

// buf returns t's device memory, which must hold bytes (what names t for
// the error).
func (g *gpuLink) buf(t backend.Tensor, what string, bytes int) (cuda.Buffer, error) {
	b, ok := g.be.DeviceBuffer(t)
	if !ok {
		return cuda.Buffer{}, fmt.Errorf("%s is not a tensor of %s", what, g.be.Name())
	}
	if b.Size < int64(bytes) {
		return cuda.Buffer{}, fmt.Errorf("%s holds %d bytes, want %d", what, b.Size, bytes)
	}
	return b, nil
}

// start queues the copies of layer l's input rows, ids and weights to the
// pinned buffers and the GPU experts of the layer into out (the CPU's
// share is added by join); op by op it then runs the layer's CPU experts.
func (g *gpuLink) start(l int, out, h, wts, ids backend.Tensor, n int) error {
	if n < 0 || n > g.maxTok {
		return fmt.Errorf("%d tokens: the hybrid step's buffers hold %d", n, g.maxTok)
	}
	if n == 0 {
		return nil
	}
	if g.lwStep = g.lw.use(n); g.lwStep {
		return g.lw.forward(l, out, h, wts, ids, n)
	}
	piece := g.pieceStep()
	var d int
	var pending bool
	if f := g.def; f != nil && !piece { // a piece's hand-off does this when it runs
		if l == f.first && f.pending {
			_ = g.x.eng.Sync() // a step that failed midway left a deferred task
		}
		d, pending = f.begin(l)
	}
	gw := g.gpuExp[l]
	if g.allGPU[l] {
		g.be.MoE(out, h, gw, wts, ids, n)
		return nil
	}
	xb, err := g.buf(h, "layer input", n*g.hid*4)
	if err != nil {
		return err
	}
	ib, err := g.buf(ids, "expert ids", n*g.k*4)
	if err != nil {
		return err
	}
	wb, err := g.buf(wts, "expert weights", n*g.k*4)
	if err != nil {
		return err
	}
	px, _, pids, pwts := g.slot(l)
	if err := g.be.Device().CopyHost(g.s, true, cuda.HostCopy{Host: px, Dev: xb, N: int64(n * g.hid * 4)},
		cuda.HostCopy{Host: pids, Dev: ib, N: int64(n * g.k * 4)}, cuda.HostCopy{Host: pwts, Dev: wb, N: int64(n * g.k * 4)}); err != nil {
		return err
	}
	if piece {
		if err := g.ev.RecordExternal(g.s); err != nil {
			return err
		}
		if gw != nil {
			g.be.MoE(out, h, gw, wts, ids, n) // runs while the CPU computes its share
		}
		return nil
	}
	if err := g.ev.Record(g.s); err != nil {
		return err
	}
	if gw != nil {
		g.be.MoE(out, h, gw, wts, ids, n) // runs while the CPU computes its share
	}
	if err := spin(g.ev); err != nil {
		return err
	}
	return g.runCPU(l, n, d, pending)
}

// join queues the copy of layer l's output to out; in a piecewise step it
// first ends the piece with the layer's hand-off.
func (g *gpuLink) join(l int, out backend.Tensor, n int) error {
	if n == 0 || g.allGPU[l] || g.lwStep {
		return nil
	}
	ob, err := g.buf(out, "experts output", n*g.hid*4)
	if err != nil {
		return err
	}
	if g.pieceStep() {
		// the piece ends after the shared expert the model queued since
		// start: the CPU experts overlap it; the next begins with the copy back
		var err error
		if g.def == nil {
			err = g.rb.CutAhead(g.handoffAhead(l, n))
		} else {
			err = g.rb.Cut(g.handoff(l, n))
		}
		if err != nil {
			return err
		}
	}
	_, pout, _, _ := g.slot(l)
	if g.gpuExp[l] == nil {
		return g.fromHost(ob, pout, n)
	}
	cb, err := g.buf(g.cpuPart, "CPU experts' share", n*g.hid*4)
	if err != nil {
		return err
	}
	if err := g.fromHost(cb, pout, n); err != nil {
		return err
	}
	g.be.Add(out, out, g.cpuPart, n)
	return nil
}

// fromHost queues the copy of the experts' output for n tokens from the
// pinned buffer src into dst (cuda.Device.CopyHost, as start's copies).
func (g *gpuLink) fromHost(dst cuda.Buffer, src *cuda.HostBuffer, n int) error {
	return g.be.Device().CopyHost(g.s, false, cuda.HostCopy{Host: src, Dev: dst, N: int64(n * g.hid * 4)})
}

// runCPU runs layer l's CPU experts on the pinned buffers once the
// layer's copies landed (with deferral, d and pending as f.begin said).
// The padding rows of a decode step padded to its graph bucket reach the
// engine with ids -1 (backend.Step.Live): it computes nothing for them and
// their outputs are zeros.
func (g *gpuLink) runCPU(l, n, d int, pending bool) error {
	if g.def != nil {
		return g.deferredRun(l, n, d, pending)
	}
	return g.x.layers[l].Forward(g.batchFor(n))
}

// batchFor sets the engine's batch to n tokens of the step's pinned
// buffers (no deferral) and returns it.
func (g *gpuLink) batchFor(n int) *cpuexperts.Batch {
	b := &g.x.batch
	*b = cpuexperts.Batch{Tokens: n, TopK: g.k, X: g.xs[:n*g.hid], IDs: g.ids[:n*g.k],
		Weights: g.wts[:n*g.k], Out: g.outs[:n*g.hid]}
	return b
}

// spin waits for the work recorded before ev, polling it (the calling
// thread runs the CPU experts right after: a blocking wait would add a
// wake-up).
func spin(ev *cuda.Event) error {
	for {
		done, err := ev.Done()
		if err != nil || done {
			return err
		}
	}
}

func (g *gpuLink) close() {
	if g.flag != nil { // a piece queued behind an ahead hand-off whose finish never ran must not hold the stream
		g.release()
	}
	if g.s != nil {
		_ = g.s.Synchronize()
	}
	g.lw.close()
	if g.def != nil {
		_ = g.x.eng.Sync() // no deferred task may still read the slots
	}
	if g.ev != nil {
		_ = g.ev.Destroy()
	}
	g.pred.close()
	free := []*cuda.HostBuffer{g.pinX, g.pinOut, g.pinIDs, g.pinWts, g.flag}
	for _, sl := range g.slots {
		free = append(free, sl.defIDs)
		if sl.owned {
			free = append(free, sl.x, sl.out, sl.ids, sl.wts)
		}
	}
	for _, h := range free {
		if h != nil {
			_ = h.Free()
		}
	}
}
