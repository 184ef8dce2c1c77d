//go:build linux && amd64 && cgo

package hybrid

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/tensor"
)

// OverlapEnv names the environment variable that, set to 1, makes the
// hybrid step overlap the CPU experts with the GPU's work through stream
// host functions instead of running them on the calling thread between the
// GPU's ops. Off by default: on the H100 machine the overlapped form
// decoded 21% slower (docs/notes/hybrid.md) — two Go callbacks per layer
// from the driver's thread cost more than the shared expert it hides.
const OverlapEnv = "KT_HYBRID_OVERLAP"

// WaitEnv names the environment variable that chooses how the synchronous
// hybrid step waits for the layer's device-to-host copies before the CPU
// experts run: "spin" (default: an event recorded after the copies, polled
// with cuEventQuery), "block" (cuEventSynchronize on that event) or
// "stream" (cuStreamSynchronize, the first form; it also waits for the GPU
// experts queued after the copies).
const WaitEnv = "KT_HYBRID_WAIT"

// GraphEnv names the environment variable that chooses how the hybrid
// step's decode steps run on the GPU. Unset or "piecewise" (the default):
// piecewise CUDA graphs — per decode bucket, one graph per stretch between
// MoE hand-offs, launched by the calling thread, which runs each layer's
// CPU experts between two launches (runbase.Base.Cut); no host node, no
// extra thread. "1" or "host": the step as one graph with the CPU experts
// as C host nodes (opt-in: on the H100 machine, alternating it with the
// op-by-op form three times in one call (8-layer Qwen3.5, AMXINT4, 15
// engine threads) gave 208/139/143 tok/s vs 300/309/295 — the host nodes'
// submit and wait on the driver's callback thread compete with the engine
// for the cores; docs/notes/coordinator.md, session 2). "0": op by op.
const GraphEnv = "KT_HYBRID_GRAPH"

// PieceEventEnv names the environment variable that, set to "after",
// makes the piecewise form record the event the CPU waits for after
// launching a piece instead of inside it (an event record node right
// after the layer's copies to host). The CPU then also waits for the GPU
// work queued between the copies and the hand-off (the shared expert, the
// GPU experts of a split layer) instead of overlapping it.
const PieceEventEnv = "KT_HYBRID_PGRAPH_EVENT"

// AheadEnv names the environment variable that chooses when the piecewise
// form launches the piece after a hand-off. Unset or 1 (the default):
// before the layer's CPU experts finish (runbase.Base.CutAhead): the
// hand-off submits the task, queues a wait for a pinned counter (ResumeEnv
// says which) and returns; the piece is launched; the counter is stored
// once the task is done, so the GPU goes on a counter store after the CPU
// instead of a graph launch after it (on the H100 machine the GPU wait and
// launches per step 0.624-0.661 -> 0.610-0.629 ms in nine pairs, decode
// faster in seven; docs/notes/hybrid.md, session 21). 0: after the task.
// Steps with expert deferral, and drivers that refuse the chosen wait
// (stream memory waits, ResumeEnv=engine or host), keep the plain hand-off.
const AheadEnv = "KT_HYBRID_AHEAD"

// ResumeEnv names the environment variable that chooses how the piece
// launched ahead (AheadEnv) goes on once the layer's CPU experts end:
// "poll" (the default): the engine stores the counter as the task ends
// (cpuexperts.Batch.Release) and a one-thread kernel reading it over the
// bus holds the piece (cuda.Stream.WaitHost; any driver); "engine": the
// engine stores it and a stream memory wait holds the piece
// (cuda.Stream.WaitValue); "host": a stream memory wait, the counter stored
// by this thread after its sync (session 21's form).
const ResumeEnv = "KT_HYBRID_RESUME"

// resumeForm is how an ahead hand-off's piece goes on (ResumeEnv).
type resumeForm int

const (
	resumePoll   resumeForm = iota // engine store, polling kernel
	resumeEngine                   // engine store, stream memory wait
	resumeHost                     // host store after sync, stream memory wait
)

var resumeNames = []string{"poll", "engine", "host"}

// CopyEnv names the environment variable that chooses how the hybrid step
// moves a layer's input rows, ids and weights to the pinned buffers and the
// experts' output back: "kernel" (the default: one small kernel each way
// reading or writing the pinned memory through its device address,
// cuda.Device.CopyHost, for hand-offs up to cuda.KernelCopyMax bytes) or
// "memcpy" (copy-engine transfers, three out and one back; each costs ~7 µs
// on the critical path against ~2 µs for a kernel, BenchmarkHandOff).
const CopyEnv = "KT_HYBRID_COPY"

// gpuLink is the hybrid step's bridge between the GPU backend and the CPU
// expert engine: pinned host buffers at fixed addresses for one step's
// layer input, router ids and weights and the experts' output, and per
// MoE layer the host functions that submit the layer's task and wait for
// it from the GPU stream (cuLaunchHostFunc).
//
// Overlapped (KT_HYBRID_OVERLAP=1), start queues on the backend's stream: the
// device-to-host copies of the layer input, ids and weights, then a host
// function that submits the engine task and returns; the model then queues
// its shared expert, which the GPU computes while the CPU runs the routed
// experts; join queues a host function that waits for the engine and the
// host-to-device copy of the result. The pinned buffers are shared by all
// layers: stream order puts a layer's copies in after the previous layer's
// task finished. Synchronous (the default), start waits for the stream,
// runs the engine on the calling thread, and join queues the copy back.
//
// Graph form (the synchronous default, while runbase captures a decode
// step): start queues the copies and a C host function that submits the
// layer's task (cpuexperts.HostTask: f32 rows straight from and to the
// pinned buffers, the step's padded token count fixed in the task), the
// GPU experts of a split layer; join queues a C host function that waits
// for the task, the copy back and the add. No Go runs on the driver's
// thread and nothing waits on the calling thread, so the whole step —
// attention, router, hand-off, shared expert, lm head — is one graph launch.
//
// Piecewise form (the default, while runbase records a piecewise decode
// step): start queues the copies and an event record node (the point the
// CPU waits for), the GPU experts of a split layer; the model queues its
// shared expert; join ends the piece there (runbase.Base.Cut) with the
// layer's hand-off — wait for the event, run the engine task on the pinned
// buffers on this thread (with expert deferral, the deferred task goes on
// while the next piece runs) — and begins the next piece with the copy
// back and the add. A replay is a loop of (MoE layers + 1) graph launches.
type gpuLink struct {
	be             *cuda.Backend
	s              *cuda.Stream
	x              *engine
	hid, k, maxTok int
	pinX, pinOut   *cuda.HostBuffer // f32 [maxTok][hid]
	pinIDs, pinWts *cuda.HostBuffer // i32 / f32 [maxTok][k]
	xs, outs, wts  []float32
	ids            []int32
	sync           bool
	memcpy         bool        // CopyEnv=memcpy: copy-engine transfers only (CopyHost's engines)
	waitMode       string      // WaitEnv's value: spin, block or stream
	ev             *cuda.Event // recorded after a layer's copies (synchronous form)
	// GPU experts (Options.GPUExperts), per model layer: the GPU's share of
	// the layer (nil: none), whether all its experts are on the GPU, and a
	// device buffer for the CPU's share, added to the GPU's.
	gpuExp  []*backend.Experts
	allGPU  []bool
	nGPU    []int
	experts int
	cpuPart backend.Tensor // f32 [maxTok][hid]; nil when no layer is split
	layers  []*linkLayer   // per model layer (nil for dense ones), overlapped only
	rb      *runbase.Base
	graphs  bool                           // decode steps may be captured (host-node graph form)
	piece   bool                           // decode steps may be captured piecewise (the default)
	evAfter bool                           // piecewise: record ev after a piece's launch (PieceEventEnv=after)
	tasks   map[int][]*cpuexperts.HostTask // graph form: per token count, per model layer
	mu      sync.Mutex
	err     error // first error of a host function, reported by the next start or join
	// expert deferral (setDeferral): two slots of pinned buffers, used by
	// the MoE layers in turn, so that a layer's deferred task may still
	// read its slot while the next layer's copies fill the other
	def     *deferral
	slots   [2]pinSlot
	dbatch  cpuexperts.Batch // the deferred task's batch
	noGraph string           // why the graph form is off ("" unless deferral turned it off)
	timing  *handoffTiming   // TimingEnv=1: piecewise hand-off times; nil when off
	// layerwise prefill (--kt-gpu-prefill-token-threshold; nil when off)
	// and whether the step begun last takes it
	lw      *layerwise
	lwStep  bool
	pred    *predictor // next-layer expert prefetch (nil when off; predOff says why)
	predOff string
	// ahead hand-offs (AheadEnv): the pinned counter the next piece waits
	// for (ctr, the uint32 at byte 0 of flag) and the value of the last
	// hand-off (flag nil: plain hand-offs)
	flag     *cuda.HostBuffer
	ctr      *uint32
	seq      uint32
	resume   resumeForm
	aheadOff string // why the ahead hand-off was not taken (the driver's answer)
}

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

// linkLayer is one MoE layer's host functions and the token count of the
// step they serve (set before they are queued, read when they run).
type linkLayer struct {
	n            atomic.Int32
	batch        cpuexperts.Batch
	submit, wait *cuda.HostFunc
}

func newGPULink(rb *runbase.Base, x *engine, layers []*Weights) (*gpuLink, error) {
	nLayers := len(layers)
	be, ok := rb.BE.(*cuda.Backend)
	if !ok {
		return nil, fmt.Errorf("the model runs on %s: the hybrid step needs the CUDA backend or the CPU", rb.BE.Name())
	}
	T := rb.Opts.MaxBatchTokens
	g := &gpuLink{be: be, s: be.Stream(), x: x, hid: x.hid, k: x.k, maxTok: T, sync: os.Getenv(OverlapEnv) != "1", rb: rb,
		waitMode: os.Getenv(WaitEnv), gpuExp: make([]*backend.Experts, nLayers), allGPU: make([]bool, nLayers), nGPU: make([]int, nLayers)}
	switch g.waitMode {
	case "":
		g.waitMode = "spin"
	case "spin", "block", "stream":
	default:
		return nil, fmt.Errorf("%s=%s: want spin, block or stream", WaitEnv, g.waitMode)
	}
	split := false
	for l, w := range layers {
		if w == nil {
			continue
		}
		g.experts = len(w.Gate)
		if w.NGPU > 0 {
			g.gpuExp[l], g.nGPU[l] = &w.OnGPU, w.NGPU
			g.allGPU[l] = w.NGPU == len(w.Gate)
			split = split || !g.allGPU[l]
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
	if !g.sync {
		g.layers = make([]*linkLayer, nLayers)
	}
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(GraphEnv))); v {
	case "", "piecewise":
		g.piece = g.sync
	case "1", "host":
		g.graphs = g.sync
	case "0", "off", "false":
	default:
		g.close()
		return nil, fmt.Errorf("%s=%s: want piecewise (the default), host (or 1) or 0", GraphEnv, v)
	}
	if g.memcpy, err = envChoice(CopyEnv, "kernel", "memcpy"); err == nil {
		g.evAfter, err = envChoice(PieceEventEnv, "node", "after")
	}
	if err != nil {
		g.close()
		return nil, err
	}
	g.tasks = map[int][]*cpuexperts.HostTask{}
	if err := g.aheadSetup(); err != nil {
		g.close()
		return nil, err
	}
	first, _ := order(layers)
	if g.pred, err = newPredictor(g, first); err != nil {
		g.close()
		return nil, err
	}
	if os.Getenv(TimingEnv) == "1" {
		g.timing = newHandoffTiming(nLayers, first)
	}
	return g, nil
}

// setDeferral turns expert deferral on: slot 0 is the step's pinned
// buffers, slot 1 a second set, each with a buffer for the deferred
// picks. The host-node graph form is turned off (its host nodes wait for
// every task; the op-by-op and piecewise steps overlap a layer's deferred
// task with the next layer's GPU work) and the overlapped form refused.
func (g *gpuLink) setDeferral(f *deferral) error {
	if !g.sync {
		return fmt.Errorf("--kt-max-deferred-experts-per-token is not implemented for %s=1 (the overlapped form); unset it", OverlapEnv)
	}
	if g.graphs {
		g.graphs = false
		g.noGraph = "expert deferral runs the hybrid decode step op by op (the host-node graph form, " + GraphEnv + "=1, has no deferral; the piecewise form, the default, has)"
	}
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

// deferredRun is the synchronous form's CPU work of layer l with expert
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

// task returns layer l's host task over the pinned buffers for n tokens,
// made on first use (one per decode bucket and MoE layer).
func (g *gpuLink) task(l, n int) (*cpuexperts.HostTask, error) {
	ts := g.tasks[n]
	if ts == nil {
		ts = make([]*cpuexperts.HostTask, len(g.x.layers))
		g.tasks[n] = ts
	}
	if ts[l] != nil {
		return ts[l], nil
	}
	t, err := g.x.layers[l].NewHostTask(cpuexperts.HostTaskMem{Tokens: n, TopK: g.k,
		X: g.pinX.Ptr(), Out: g.pinOut.Ptr(), IDs: g.pinIDs.Ptr(), Weights: g.pinWts.Ptr()})
	if err != nil {
		return nil, err
	}
	ts[l] = t
	return t, nil
}

// graphStep reports whether the ops queued now are recorded into a graph
// (the graph form's start and join apply).
func (g *gpuLink) graphStep() bool { return g.graphs && g.rb.Capturing() }

// pieceStep reports whether the ops queued now are recorded into a
// piecewise step (the piecewise form's start and join apply).
func (g *gpuLink) pieceStep() bool { return g.piece && g.rb.CapturingPieces() }

// graphSetup tells runbase how the hybrid step's decode steps may be
// captured: piecewise (the default), as one graph with host nodes (opt-in)
// or not at all. It returns why graphs are off ("" when they are not) and
// whether replayed steps' engine errors must be collected afterwards (the
// host-node form's).
func (g *gpuLink) graphSetup(rb *runbase.Base) (off string, collect bool) {
	if g.piece {
		if ok, why := rb.PiecewiseGraphs(); !ok {
			g.piece = false
			return "hybrid step op by op (" + why + ")", false
		}
		return "", false
	}
	if g.graphs {
		return "", true
	}
	if g.noGraph != "" {
		return "hybrid step: " + g.noGraph, false
	}
	return "hybrid step (routed experts on the CPU expert engine) op by op: " + GraphEnv + "=0 or " + OverlapEnv + "=1", false
}

// graphForm says how decode steps run, for Path.
func (g *gpuLink) graphForm() string {
	switch {
	case g.piece:
		ev := "waiting on an event node after the layer's copies"
		if g.evAfter {
			ev = "waiting on an event after each piece (" + PieceEventEnv + "=after)"
		}
		switch {
		case g.flag != nil:
			ev += "; the next piece launched before the CPU experts end, waiting for a pinned counter (" + AheadEnv + "=1; not with deferral; " +
				ResumeEnv + "=" + resumeNames[g.resume] + ")"
		case g.aheadOff != "":
			ev += "; " + AheadEnv + " not taken: " + g.aheadOff
		}
		return "decode steps may run as piecewise CUDA graphs (one per stretch between MoE hand-offs; CPU experts on this thread between launches, " + ev + ")"
	case g.graphs:
		return "decode steps may run as CUDA graphs (CPU experts as C host functions)"
	}
	return "decode steps op by op"
}

// handoff is layer l's host work between two pieces of a piecewise step
// of n rows: wait for the layer's copies to host, run its CPU experts.
func (g *gpuLink) handoff(l, n int) func() error {
	sn, next, nn := g.pred.take(l) // this step's predictions: layer l's at its start, the next layer's
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
		return g.handoffDone(l, t0, t1, next, nn, err)
	}
}

// handoffWait is a hand-off's first part: the at-start prefetch of layer l
// (sn tokens; 0: none; after the first MoE layer, PredictEnv=refine's
// second prediction), then the wait for the layer's copies to host; with
// TimingEnv=1 it scores the prediction and returns when it began (t0) and
// when the copies were in (t1).
func (g *gpuLink) handoffWait(l, n, sn int) (t0, t1 time.Time, err error) {
	if g.evAfter {
		if err := g.ev.Record(g.s); err != nil {
			return t0, t1, err
		}
	}
	if g.timing != nil {
		t0 = time.Now()
	}
	if sn > 0 {
		var err error
		if l == g.pred.first {
			err = g.prefetch(atStart, l, sn)
		} else { // PredictEnv=refine: the second prediction
			err = g.refine(l, sn)
		}
		if err != nil {
			return t0, t1, err
		}
	}
	if err := g.wait(); err != nil {
		return t0, t1, err
	}
	if g.timing != nil {
		g.scorePrediction(l, n) // before the deferral split rewrites the picks
		t1 = time.Now()
	}
	return t0, t1, nil
}

// handoffDone is a hand-off's last part, once layer l's CPU experts ended
// with err: the timing (TimingEnv=1) and, after a task that succeeded, the
// prefetch of the next MoE layer's predicted experts (nn tokens; 0: none),
// which reads while the next pieces run.
func (g *gpuLink) handoffDone(l int, t0, t1 time.Time, next, nn int, err error) error {
	if g.timing != nil {
		g.timing.add(l, t0, t1, time.Now())
	}
	if err == nil && nn > 0 {
		err = g.prefetch(atNext, next, nn)
	}
	return err
}

// handoffAhead is handoff in the two parts of runbase.Base.CutAhead
// (AheadEnv, no deferral): after waits for the layer's copies, submits
// its CPU experts, keeps the next layer's prediction and queues the next
// piece's wait for the counter's next value; finish waits for the task and
// stores that value (unless ResumeEnv=host, the engine stored it as the
// task ended), which lets the piece (launched in between) go on, whatever
// the task's outcome, then queues the prefetch. The prediction is
// read in after: once the next piece is launched, the prediction slot's
// event stands for that piece's record of it, which waits for the counter.
func (g *gpuLink) handoffAhead(l, n int) (after, finish func() error) {
	sn, next, nn := g.pred.take(l)
	var t0, t1 time.Time
	after = func() error {
		var err error
		if t0, t1, err = g.handoffWait(l, n, sn); err != nil {
			return err
		}
		b, v := g.batchFor(n), g.seq+1
		if g.resume != resumeHost { // the engine lets the piece go on as the task ends
			b.Release, b.ReleaseValue = g.ctr, v
		}
		err = g.x.layers[l].Submit(b)
		b.Release = nil // the batch is reused by plain hand-offs
		if err != nil {
			return err
		}
		g.seq = v   // the engine or finish stores it: the next hand-off waits for the one after
		if nn > 0 { // while the task runs: the GPU computes it after the layer's copies
			var ids []int32
			if ids, err = g.predicted(atNext, nn); err == nil {
				g.pred.held = append(g.pred.held[:0], ids...)
			}
		}
		if err == nil {
			err = g.wait4(v)
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

// wait4 queues the ahead hand-off's wait for the counter to reach v
// (ResumeEnv's form).
func (g *gpuLink) wait4(v uint32) error {
	if g.resume == resumePoll {
		return g.s.WaitHost(g.flag, 0, v)
	}
	return g.s.WaitValue(g.flag, 0, v)
}

// aheadSetup reads AheadEnv and ResumeEnv and, when they ask for the ahead
// hand-off in the piecewise form, allocates its counter and checks that
// the wait can be queued (stream memory waits need the driver's support;
// else the plain hand-off stays, said by Path).
func (g *gpuLink) aheadSetup() error {
	off, err := envChoice(AheadEnv, "1", "0")
	if err != nil || off || !g.piece {
		return err
	}
	r, err := envEnum(ResumeEnv, resumeNames...)
	if err != nil {
		return err
	}
	g.resume = resumeForm(r)
	f, err := g.be.Device().AllocHost(64)
	if err != nil {
		return fmt.Errorf("hybrid step: %s counter: %w", AheadEnv, err)
	}
	ctr := &cuda.HostSlice[uint32](f)[0]
	*ctr = 0 // g.seq's start: pinned memory comes uninitialised
	// a wait that passes at once: the driver queues it (or says why not),
	// and WaitHost's kernel is loaded now, while nothing waits on this thread
	g.flag = f
	err = g.wait4(0)
	g.flag = nil
	if err == nil {
		err = g.s.Synchronize()
	}
	if err != nil {
		_ = f.Free()
		g.aheadOff = err.Error()
		return nil
	}
	g.flag, g.ctr = f, ctr
	return nil
}

// release stores the last ahead hand-off's value into the counter: the
// piece queued behind it goes on.
func (g *gpuLink) release() { atomic.StoreUint32(g.ctr, g.seq) }

// picks returns layer l's expert ids for n tokens once the layer's copies
// landed, from the buffers slot says the layer uses.
func (g *gpuLink) picks(l, n int) []int32 {
	_, _, ids, _ := g.slot(l)
	return cuda.HostSlice[int32](ids)[:n*g.k]
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

// mode says how the CPU work is scheduled, for Path.
func (g *gpuLink) mode() string {
	if g.sync {
		return "CPU experts synchronous between the GPU's ops (" + WaitEnv + "=" + g.waitMode + ")"
	}
	return "CPU experts overlapped with the GPU through stream host functions (" + OverlapEnv + "=1)"
}

// placement says how many routed experts of each MoE layer are on the GPU,
// for Path (the startup log).
func (g *gpuLink) placement() string {
	var per []string
	total, moe := 0, 0
	for l := range g.allGPU {
		if g.x.layers[l] == nil {
			continue
		}
		moe++
		total += g.nGPU[l]
		per = append(per, strconv.Itoa(g.nGPU[l]))
	}
	if total == 0 {
		return "no routed expert on the GPU"
	}
	return fmt.Sprintf("GPU experts per MoE layer %s (%d of %d)", strings.Join(per, ","), total, moe*g.experts)
}

// wait waits for the copies queued before the event (synchronous form).
func (g *gpuLink) wait() error {
	if g.waitMode == "stream" {
		return g.be.Sync()
	}
	return g.waitEvent(g.ev)
}

// waitEvent waits for the work recorded before ev as WaitEnv says:
// cuEventSynchronize (block) or polling (spin, and stream's events).
func (g *gpuLink) waitEvent(ev *cuda.Event) error {
	if g.waitMode == "block" {
		return ev.Synchronize()
	}
	for {
		done, err := ev.Done()
		if err != nil || done {
			return err
		}
	}
}

// layer returns layer l's host functions, made on first use.
func (g *gpuLink) layer(l int) *linkLayer {
	if L := g.layers[l]; L != nil {
		return L
	}
	L := &linkLayer{}
	L.submit = cuda.NewHostFunc(func() {
		n := int(L.n.Load())
		L.batch = cpuexperts.Batch{Tokens: n, TopK: g.k, X: g.xs[:n*g.hid], IDs: g.ids[:n*g.k],
			Weights: g.wts[:n*g.k], Out: g.outs[:n*g.hid]}
		g.fail(g.x.layers[l].Submit(&L.batch))
	})
	L.wait = cuda.NewHostFunc(func() {
		g.fail(g.x.eng.Sync())
	})
	g.layers[l] = L
	return L
}

// fail records the first error of a host function.
func (g *gpuLink) fail(err error) {
	if err == nil {
		return
	}
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
}

// taken returns and clears the recorded host-function error.
func (g *gpuLink) taken() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.err
	g.err = nil
	return err
}

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
// pinned buffers and the engine's task (see gpuLink), and the GPU experts
// of the layer into out (the CPU's share is added by join).
func (g *gpuLink) start(l int, out, h, wts, ids backend.Tensor, n int) error {
	if err := g.taken(); err != nil {
		return err
	}
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
	if err := g.be.Device().CopyHost(g.s, true, g.memcpy, cuda.HostCopy{Host: px, Dev: xb, N: int64(n * g.hid * 4)},
		cuda.HostCopy{Host: pids, Dev: ib, N: int64(n * g.k * 4)}, cuda.HostCopy{Host: pwts, Dev: wb, N: int64(n * g.k * 4)}); err != nil {
		return err
	}
	if piece {
		if !g.evAfter {
			if err := g.ev.RecordExternal(g.s); err != nil {
				return err
			}
		}
		if gw != nil {
			g.be.MoE(out, h, gw, wts, ids, n) // runs while the CPU computes its share
		}
		return nil
	}
	if g.graphStep() {
		t, err := g.task(l, n)
		if err != nil {
			return err
		}
		submit, _, arg := t.HostFuncs()
		if err := g.s.LaunchHostFuncC(submit, arg); err != nil {
			return err
		}
		if gw != nil {
			g.be.MoE(out, h, gw, wts, ids, n) // runs while the CPU computes its share
		}
		return nil
	}
	if g.sync {
		if err := g.ev.Record(g.s); err != nil {
			return err
		}
		if gw != nil {
			g.be.MoE(out, h, gw, wts, ids, n) // runs while the CPU computes its share
		}
		if err := g.wait(); err != nil {
			return err
		}
		return g.runCPU(l, n, d, pending)
	}
	L := g.layer(l)
	L.n.Store(int32(n))
	if err := g.s.LaunchHostFunc(L.submit); err != nil {
		return err
	}
	if gw != nil {
		g.be.MoE(out, h, gw, wts, ids, n)
	}
	return nil
}

// join queues the wait for layer l's task (overlapped) and the copy of
// its output to out.
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
		if g.flag != nil && g.def == nil {
			err = g.rb.CutAhead(g.handoffAhead(l, n))
		} else {
			err = g.rb.Cut(g.handoff(l, n))
		}
		if err != nil {
			return err
		}
	} else if g.graphStep() {
		t, err := g.task(l, n)
		if err != nil {
			return err
		}
		_, wait, arg := t.HostFuncs()
		if err := g.s.LaunchHostFuncC(wait, arg); err != nil {
			return err
		}
	} else if !g.sync {
		if err := g.s.LaunchHostFunc(g.layer(l).wait); err != nil {
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
	return g.be.Device().CopyHost(g.s, false, g.memcpy, cuda.HostCopy{Host: src, Dev: dst, N: int64(n * g.hid * 4)})
}

func (g *gpuLink) close() {
	if g.flag != nil { // a piece queued behind an ahead hand-off whose finish never ran must not hold the stream
		g.release()
	}
	if g.s != nil {
		_ = g.s.Synchronize() // no host function may still run
	}
	g.lw.close()
	if g.def != nil {
		_ = g.x.eng.Sync() // nor a deferred task on the slots
	}
	for _, L := range g.layers {
		if L != nil {
			L.submit.Release()
			L.wait.Release()
		}
	}
	for _, ts := range g.tasks {
		for _, t := range ts {
			if t != nil {
				t.Free()
			}
		}
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

// envChoice reads a two-way knob from the environment variable name: unset
// or def is false, alt is true, anything else an error naming both.
func envChoice(name, def, alt string) (bool, error) {
	i, err := envEnum(name, def, alt)
	return i == 1, err
}

// envEnum reads a knob of several values from the environment variable
// name: the index of its value among values, unset being values[0] (the
// default); anything else is an error naming them all.
func envEnum(name string, values ...string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	if i := slices.Index(values, v); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("%s=%s: want %s (the default) or %s", name, v, values[0], strings.Join(values[1:], " or "))
}
