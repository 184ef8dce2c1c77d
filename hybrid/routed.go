// Package hybrid is the routed-expert part of a MoE block, shared by every
// model family in arch/: binding one layer's experts (per-expert keys as
// published, or transformers 5's fused 3-D tensors sliced per expert
// without a copy) and computing them, on the CPU expert engine
// (moe/cpuexperts, bf16 weights in place) when the backend is the CPU and
// the engine serves the shapes, else with the backend's MoE op. On the GPU
// backend with a CPU expert method named (--kt-weight-path, --kt-method)
// it is the hybrid step: the routed experts stay in host memory and run on
// the engine, the layer input, ids and weights go to pinned host buffers
// and the result comes back to the GPU (Hybrid). A shared expert, where a
// family has one, stays with the model; a model makes one call per step
// before its layers (Experts.StepStart) and one per MoE layer
// (Experts.Layer).
//
// The parts, in the order a MoE layer's data meets them:
//
//   - routed.go: binding a layer's experts (Load), the per-step and the
//     per-layer calls;
//   - engine.go: the CPU expert engine that computes them (engine_other.go
//     where the engine is not built);
//   - gpulink.go: the hybrid step's pinned buffers and copies between the
//     GPU and the engine, op by op and in piecewise CUDA graphs;
//   - handoff.go: the hand-off between two graph pieces (the next piece
//     launched ahead, held by a polling kernel until the engine is done);
//   - prefetch.go: the next MoE layer's picks predicted on the GPU and its
//     experts' weights prefetched by the engine;
//   - deferral.go, deferral_gpu.go: expert deferral to the next MoE layer;
//   - gpuexperts.go, gpuexperts_gpu.go: GPU-resident experts, their
//     placement and dynamic update;
//   - layerwise.go, layerwise_gpu.go: layerwise GPU prefill;
//   - timing.go: the hand-offs' timing report.
package hybrid

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/expertsource"
	"github.com/ktserve/kt/tensor"
)

// Hybrid reports whether rb's model runs its routed experts on the CPU
// expert engine while the rest runs on another backend (the GPU): the
// backend is not the CPU and Opts.Experts names a CPU expert method (what
// --kt-weight-path with --kt-method asks for). "auto" and "backend" keep
// every expert on the model's backend.
func Hybrid(rb *runbase.Base) bool {
	if _, isCPU := rb.BE.(*cpu.Backend); isCPU {
		return false
	}
	switch rb.Opts.Experts {
	case "", "auto", "backend":
		return false
	}
	return true
}

// hostTensor stands for an expert matrix that stays in host memory (the
// CPU expert engine reads it there): it has the checkpoint tensor's dtype
// and shape but no backend copy.
type hostTensor struct{ h backend.Host }

func (t hostTensor) DType() tensor.DType { return t.h.DType }
func (t hostTensor) Shape() []int        { return t.h.Shape }

// Weights are one layer's routed experts: the backend's tensors and the
// checkpoint bytes they were made from (what the CPU expert engine reads).
type Weights struct {
	// Experts are the experts this rank computes with the backend's op
	// (Experts' tensors; nil entries for the experts other ranks compute,
	// which the op skips); in the hybrid step host stand-ins for the CPU
	// expert engine's.
	backend.Experts
	HostGate, HostUp, HostDown []backend.Host // per expert
	// With device experts (Options.GPUExperts; the hybrid step's GPU
	// experts, or the CPU backend's MoE op): GPU[e] is true for the
	// layer's device experts, which the CPU expert engine skips, NGPU
	// counts them, and OnGPU holds the tensors of this rank's share of
	// them (all of them on one rank; nil entries for the others: the MoE
	// op skips those), NShare counting it. GPU is nil when the layer has
	// none.
	GPU    []bool
	NGPU   int
	OnGPU  backend.Experts
	NShare int
	// Router is the layer's router weight and RouterNorm the norm weight
	// of the router's input (the layer's post-attention norm), set by the
	// model after Load: the hybrid step predicts the layer's picks with
	// them during the MoE layer before it, or at the step's start for a
	// first MoE layer that is layer 0 (prefetch.go).
	Router, RouterNorm backend.Tensor
}

// Load binds the E experts of layer l under p (a layer's "...mlp.experts.")
// from per-expert keys (p+"{e}.{gate,up,down}_proj.weight") or from the
// fused p+"gate_up_proj" [E, 2I, H] (gate rows first) and p+"down_proj"
// [E, H, I], as plan places them. In the hybrid step (Hybrid) the experts
// stay in host memory for the CPU expert engine, except the device experts
// of this rank's share: only those are uploaded. Rank 0 binds every
// expert but the other ranks' shares; another rank only its share (every
// expert's host bytes are kept on every rank: layerwise prefill uploads
// a rank's share of them).
func Load(rb *runbase.Base, plan *Plan, l int, p string, E, H, I int) (*Weights, error) {
	hybrid := Hybrid(rb)
	w := &Weights{Experts: backend.Experts{Hidden: H, Inter: I,
		Gate: make([]backend.Tensor, E), Up: make([]backend.Tensor, E), Down: make([]backend.Tensor, E)},
		HostGate: make([]backend.Host, E), HostUp: make([]backend.Host, E), HostDown: make([]backend.Host, E)}
	share := plan.Share(l)
	if mask := plan.Mask(l); mask != nil {
		if len(mask) != E {
			return nil, fmt.Errorf("%s: layer %d: placement for %d experts, the layer has %d", rb.Name, l, len(mask), E)
		}
		w.GPU = mask
		for e := range E {
			if mask[e] {
				w.NGPU++
			}
			if share[e] {
				w.NShare++
			}
		}
		w.OnGPU = backend.Experts{Hidden: H, Inter: I,
			Gate: make([]backend.Tensor, E), Up: make([]backend.Tensor, E), Down: make([]backend.Tensor, E)}
	}
	root := rb.Root()
	// e is the expert a bind call serves (set by the loops below)
	e := 0
	bind := func(dst *backend.Tensor, host *backend.Host, h backend.Host) error {
		*host = h
		device, mine := w.GPU != nil && w.GPU[e], share != nil && share[e]
		switch {
		case device && !mine, !device && !root:
			return nil // another rank computes it
		case h.PackedInt4() && device:
			// a device expert of a pack-quantized INT4 checkpoint runs on
			// the backend's MoE op as its bf16 values
			var err error
			if h, err = expertsource.PackedInt4BF16(h); err != nil {
				return err
			}
		case hybrid && !device, h.PackedInt4():
			if err := h.Check(); err != nil {
				return err
			}
			*dst = hostTensor{h}
			return nil
		}
		var err error
		*dst, err = rb.BE.Weight(h)
		return err
	}
	// onGPU copies expert e's backend tensors to OnGPU for a device
	// expert of this rank's share.
	onGPU := func() {
		if share != nil && share[e] {
			w.OnGPU.Gate[e], w.OnGPU.Up[e], w.OnGPU.Down[e] = w.Gate[e], w.Up[e], w.Down[e]
		}
	}
	if _, fused := rb.Ckpt.Info(p + "gate_up_proj"); fused {
		gu, err := rb.Host(p+"gate_up_proj", E, 2*I, H)
		if err != nil {
			return nil, err
		}
		dn, err := rb.Host(p+"down_proj", E, H, I)
		if err != nil {
			return nil, err
		}
		// part is rows [first, first+rows) of expert e of src (FP8: with
		// their block scales, backend.ExpertRows)
		part := func(src backend.Host, e int, name string, first, rows int) (backend.Host, error) {
			return backend.ExpertRows(src, fmt.Sprintf("%s[%d].%s", src.Name, e, name), e, first, rows)
		}
		for e = 0; e < E; e++ {
			for _, x := range []struct {
				dst         *backend.Tensor
				host        *backend.Host
				src         backend.Host
				name        string
				first, rows int
			}{
				{&w.Gate[e], &w.HostGate[e], gu, "gate", 0, I},
				{&w.Up[e], &w.HostUp[e], gu, "up", I, I},
				{&w.Down[e], &w.HostDown[e], dn, "down", 0, H},
			} {
				h, err := part(x.src, e, x.name, x.first, x.rows)
				if err != nil {
					return nil, err
				}
				if err := bind(x.dst, x.host, h); err != nil {
					return nil, err
				}
			}
			onGPU()
		}
		return w, nil
	}
	for e = 0; e < E; e++ {
		q := fmt.Sprintf("%s%d.", p, e)
		for _, x := range []struct {
			dst  *backend.Tensor
			host *backend.Host
			name string
			r, c int
		}{
			{&w.Gate[e], &w.HostGate[e], "gate_proj.weight", I, H},
			{&w.Up[e], &w.HostUp[e], "up_proj.weight", I, H},
			{&w.Down[e], &w.HostDown[e], "down_proj.weight", H, I},
		} {
			h, err := rb.Host(q+x.name, x.r, x.c)
			if err != nil {
				return nil, err
			}
			if err := bind(x.dst, x.host, h); err != nil {
				return nil, err
			}
		}
		onGPU()
	}
	return w, nil
}

// Experts computes the routed experts of a model's MoE layers.
type Experts struct {
	rb      *runbase.Base
	engine  *engine // nil: the backend's MoE op
	path    string
	idsHost []int32        // expert picks read back while recording
	def     *deferral      // expert deferral (Options.ExpertDeferral); nil when off
	lw      *layerwise     // a tensor-parallel rank other than 0: its layerwise prefill (rank 0's is the engine's); nil when off
	layers  []*Weights     // per model layer; nil for a dense one
	devOut  backend.Tensor // CPU backend: the device experts' share of a layer, added to the engine's
	first   int            // the first MoE layer (-1: none)
	next    []int          // per model layer, the next MoE layer after it (-1: none)
	eps     float32        // the epsilon of the routers' input norm
}

// New chooses what computes the routed experts of layers (indexed by model
// layer, nil for a dense one) of the model of config c as rb.Opts.Experts
// says: "backend" is the
// backend's MoE op; "auto" the CPU expert engine with bf16 weights in place
// (a pack-quantized INT4 checkpoint's codes: RAWINT4) when it can serve the
// model, else the op (Path says why); a method name
// (BF16, AMXINT8, ...) the engine with that method, or an error.
func New(rb *runbase.Base, c *modelconfig.Config, layers []*Weights) (*Experts, error) {
	if rb.Opts.GPUPrefillThreshold > 0 && packedInt4(layers) {
		return nil, fmt.Errorf("%s: the routed experts are packed INT4 (compressed-tensors), which layerwise prefill does not upload: no --kt-gpu-prefill-token-threshold with such a checkpoint", rb.Name)
	}
	x := &Experts{rb: rb, path: "backend MoE op (" + rb.BE.Name() + ")", layers: layers, eps: float32(c.RMSNormEps)}
	x.first, x.next = order(layers)
	method := rb.Opts.Experts
	if c.NumMoELayers() == 0 {
		return x, nil
	}
	if !rb.Root() {
		// another rank: its share of the device experts, on its backend,
		// and of every expert in a layerwise prefill step
		x.path = fmt.Sprintf("rank %d: its share of the device experts on the backend MoE op (%s)%s", rb.Layout().Rank, rb.BE.Name(), describeDevice(layers))
		if t := rb.Opts.GPUPrefillThreshold; t > 0 && Hybrid(rb) {
			var err error
			if x.lw, err = newLayerwise(rb, layers, t, rb.Opts.DynamicExpertUpdate, method, c.TopK, nil); err != nil {
				return nil, fmt.Errorf("%s: rank %d: %w", rb.Name, rb.Layout().Rank, err)
			}
			x.path += x.lw.describe()
		}
		return x, nil
	}
	if err := attachLoRA(rb, c, layers); err != nil {
		return nil, fmt.Errorf("%s: %w", rb.Name, err)
	}
	var eng *engine
	err := errors.New("the backend's MoE op is asked for")
	if method != "backend" {
		eng, err = newEngine(rb, method, c, layers)
	}
	switch {
	case method == "backend":
	case err == nil:
		x.engine = eng
	case method != "auto" && method != "":
		return nil, fmt.Errorf("%s: CPU expert method %s: %w", rb.Name, method, err)
	default:
		x.path += "; CPU expert engine not used: " + err.Error()
	}
	if x.engine == nil && packedInt4(layers) {
		if err := bindPackedOnBackend(rb, layers); err != nil {
			return nil, fmt.Errorf("%s: %w", rb.Name, err)
		}
		x.path += "; the packed INT4 experts as their bf16 values"
	}
	if _, isCPU := rb.BE.(*cpu.Backend); x.engine == nil && !isCPU && rb.Opts.LoRA != nil && rb.Opts.LoRA.Expert != nil {
		return nil, fmt.Errorf("%s: KT expert LoRA runs on the CPU expert engine; the routed experts run on %s here (%s)", rb.Name, rb.BE.Name(), x.path)
	}
	if err := x.checkLayerwise(); err != nil {
		if x.engine != nil {
			x.engine.close()
		}
		return nil, err
	}
	if err := x.setDeferral(c, layers); err != nil {
		if x.engine != nil {
			x.engine.close()
		}
		return nil, err
	}
	if x.engine != nil {
		if err := x.engine.setDeferral(x.def); err != nil {
			x.engine.close()
			return nil, fmt.Errorf("%s: %w", rb.Name, err)
		}
		if Hybrid(rb) {
			x.engine.hybridGraphs(rb)
		}
		x.path = x.engine.describe() + x.def.describe()
		if err := x.deviceSetup(); err != nil {
			x.engine.close()
			return nil, fmt.Errorf("%s: %w", rb.Name, err)
		}
	} else if x.def != nil {
		x.path += "; reference path" + x.def.describe()
	}
	if !Hybrid(rb) {
		x.path += describeDevice(layers)
	}
	return x, nil
}

// deviceSetup allocates, on the CPU backend, the buffer for the device
// experts' share of a layer that the CPU expert engine also has experts of
// (the two are added).
func (x *Experts) deviceSetup() error {
	if _, isCPU := x.rb.BE.(*cpu.Backend); !isCPU {
		return nil
	}
	for _, w := range x.layers {
		if w != nil && w.NShare > 0 && w.NGPU < len(w.Gate) {
			var err error
			if x.devOut, err = x.rb.BE.Alloc(tensor.F32, x.rb.Opts.MaxBatchTokens, w.Hidden); err != nil {
				return fmt.Errorf("buffer for the device experts' share: %w", err)
			}
			return nil
		}
	}
	return nil
}

// describeDevice says how many device experts of each MoE layer this rank
// computes on the backend's MoE op ("" with none), for Path.
func describeDevice(layers []*Weights) string {
	var per []string
	total := 0
	for _, w := range layers {
		if w != nil {
			per = append(per, fmt.Sprintf("%d/%d", w.NShare, w.NGPU))
			total += w.NGPU
		}
	}
	if total == 0 {
		return ""
	}
	return "; device experts (this rank's / the layer's) per MoE layer " + strings.Join(per, ",") + " on the backend MoE op"
}

// checkLayerwise refuses layerwise prefill and dynamic expert update
// where they cannot apply: they belong to the hybrid step (the CPU expert
// engine with the rest on the GPU), and the update runs only inside
// layerwise prefill.
func (x *Experts) checkLayerwise() error {
	o := x.rb.Opts
	switch {
	case o.DynamicExpertUpdate && o.GPUPrefillThreshold <= 0:
		return fmt.Errorf("%s: --kt-enable-dynamic-expert-update works only inside layerwise GPU prefill: set --kt-gpu-prefill-token-threshold too", x.rb.Name)
	case o.GPUPrefillThreshold > 0 && (x.engine == nil || !Hybrid(x.rb)):
		return fmt.Errorf("%s: --kt-gpu-prefill-token-threshold %d: layerwise GPU prefill belongs to the hybrid step (a GPU and a CPU expert method, --kt-method); here the routed experts run on %s", x.rb.Name, o.GPUPrefillThreshold, x.path)
	}
	return nil
}

// setDeferral sets up rb.Opts.ExpertDeferral over layers: on the CPU
// expert engine (the CPU backend or the hybrid step) or, on the CPU
// backend, the backend's MoE op (the reference). Device experts are never
// deferred, so a layer whose experts are all on the device defers
// nothing, nor does the MoE layer before it. The backend's op on the GPU
// has no CPU task to defer. With tensor parallelism only rank 0 defers
// (the other ranks have no deferral state): the deferred output is added
// to the next MoE layer's on rank 0, before that layer's Broadcast or
// all-reduce.
func (x *Experts) setDeferral(c *modelconfig.Config, layers []*Weights) error {
	d := x.rb.Opts.ExpertDeferral
	if d == 0 {
		return nil
	}
	_, isCPU := x.rb.BE.(*cpu.Backend)
	if x.engine == nil && !isCPU {
		return fmt.Errorf("%s: --kt-max-deferred-experts-per-token %d: deferral applies to routed experts on the CPU expert engine (--kt-weight-path with --kt-method); here they run on %s", x.rb.Name, d, x.rb.BE.Name())
	}
	onCPU := make([]bool, len(layers))
	for l, w := range layers {
		onCPU[l] = w != nil && !(w.NGPU > 0 && w.NGPU == len(w.Gate))
	}
	f, err := newDeferral(layers, onCPU, d, c.TopK, c.NumExperts, x.rb.Opts.MaxBatchTokens)
	if err != nil {
		return fmt.Errorf("%s: %w", x.rb.Name, err)
	}
	x.def = f
	return nil
}

// Deferred returns the number of routed experts per token that layer l
// defers to the next MoE layer (0 without deferral, on a dense layer and
// on the last MoE layer).
func (x *Experts) Deferred(l int) int {
	if x.def == nil || l < 0 || l >= len(x.def.plan) {
		return 0
	}
	return x.def.plan[l]
}

// LayerwiseStats reports what layerwise GPU prefill and the dynamic
// expert update did so far (zero when they are off).
func (x *Experts) LayerwiseStats() LayerwiseStats {
	switch {
	case x == nil:
		return LayerwiseStats{}
	case x.lw != nil:
		return x.lw.statsNow()
	case x.engine == nil:
		return LayerwiseStats{}
	}
	return x.engine.layerwiseStats()
}

// Path says what computes the routed experts (the CPU expert engine and
// its kernels, or the backend's MoE op and why); a tensor-parallel rank
// other than 0 has no Experts (nil): rank 0's compute them.
func (x *Experts) Path() string {
	if x == nil {
		return "rank 0's"
	}
	return x.path
}

// Timing reports the hybrid step's hand-off times when
// settings.HybridTiming asks for them (what the decode steps so far spent waiting for the GPU pieces and
// in the CPU experts), else "".
func (x *Experts) Timing() string {
	if x == nil || x.engine == nil {
		return ""
	}
	return x.engine.timing()
}

// Block is what a model hands its MoE layers: the step's activation
// buffers (the same tensors at every call) and its shared expert.
type Block struct {
	In           backend.Tensor // the layer's normed input rows, which the router read
	Out          backend.Tensor // the layer's MLP output: the routed experts' plus the shared expert's
	RouteWeights backend.Tensor // the router's top-k weights per row
	RouteIDs     backend.Tensor // the router's top-k expert ids per row (I32)
	Residual     backend.Tensor // the residual stream the layer's MLP output is added to
	// Shared, for a family with a shared expert, queues layer l's shared
	// expert over the first n rows of In and returns its output; nil: none.
	Shared func(l, n int) backend.Tensor
}

// StepStart is the hook a model calls once per step, before its first
// layer, with residual the residual stream entering layer 0 (after the
// embedding) and n the step's rows. In the hybrid step's one-token
// piecewise decode steps, when the model's first MoE layer is layer 0, it
// queues the prediction of that layer's expert picks: the layer's router
// over residual normed with its router's input norm, on the GPU ahead of
// the layer's attention. The first MoE layer has no MoE layer before it
// to predict it during (Layer), so this is its only prediction: its
// hand-off reads it and has the CPU expert engine prefetch the predicted
// experts' weights, which the engine reads while the GPU runs the
// attention, before it waits for the layer (prefetch.go). A model whose
// first MoE layer comes after dense layers gets no prediction for it;
// every other path, and every other step, queues nothing.
func (x *Experts) StepStart(residual backend.Tensor, n int) error {
	if x.engine == nil || x.first != 0 {
		return nil
	}
	w := x.layers[0]
	if err := x.engine.predictStart(0, residual, w.RouterNorm, w.Router, x.eps, n); err != nil {
		return fmt.Errorf("%s: layer 0 expert prediction: %w", x.rb.Name, err)
	}
	return nil
}

// Layer computes MoE layer l's routed experts over the first n rows of
// b.In with the router's picks in b into b.Out, and adds the shared
// expert's output where the family has one. In the hybrid step the CPU
// computes the routed experts while the GPU runs the shared expert and
// predicts the next MoE layer's picks, which the CPU then prefetches
// (prefetch.go). It is the one call a model makes per MoE layer.
func (x *Experts) Layer(l int, b *Block, n int) error {
	if err := x.start(l, b.Out, b.In, x.layers[l], b.RouteWeights, b.RouteIDs, n); err != nil {
		return err
	}
	var shared backend.Tensor
	if b.Shared != nil {
		shared = b.Shared(l, n)
	}
	if next := x.next[l]; next >= 0 && x.engine != nil {
		nw := x.layers[next]
		if err := x.engine.predict(next, b.Residual, shared, nw.RouterNorm, nw.Router, x.eps, n); err != nil {
			return fmt.Errorf("%s: layer %d expert prediction: %w", x.rb.Name, next, err)
		}
	}
	if err := x.join(l, b.Out, n); err != nil {
		return err
	}
	if shared != nil {
		x.rb.BE.Add(b.Out, b.Out, shared, n)
	}
	return nil
}

// start begins layer l's routed experts w for the first n rows of h with
// router weights wts and expert ids ids (top-k per row) into out. Until
// join(l, out, n) returns, out is not valid and h, wts and ids must not be
// overwritten; ops queued in between (a shared expert on the GPU) run
// while the CPU computes the routed experts of the hybrid step. Every
// other path completes the work in start.
func (x *Experts) start(l int, out, h backend.Tensor, w *Weights, wts, ids backend.Tensor, n int) error {
	if rec := x.rb.Opts.ExpertRecorder; rec != nil && rec.Recording() && x.rb.Root() { // rank 0 records every rank's picks
		if err := x.record(rec, l, ids, n); err != nil {
			return err
		}
	}
	if x.lw.use(n) { // a rank other than 0: its share of every expert
		if err := x.lw.forward(l, out, h, wts, ids, n); err != nil {
			return fmt.Errorf("%s: layer %d experts, layerwise: %w", x.rb.Name, l, err)
		}
		return nil
	}
	if x.engine == nil {
		if x.def != nil {
			if err := x.refStart(l, out, h, w, wts, ids, n); err != nil {
				return fmt.Errorf("%s: layer %d experts: %w", x.rb.Name, l, err)
			}
			return nil
		}
		ex := &w.Experts
		if !x.rb.Root() && w.GPU != nil {
			ex = &w.OnGPU // this rank's share of the device experts, which the dynamic update moves
		}
		x.rb.BE.MoE(out, h, ex, wts, ids, n)
		return nil
	}
	if x.engine.onCPU() && w.NGPU > 0 {
		return x.startDevice(l, out, h, w, wts, ids, n)
	}
	if err := x.engine.start(x.rb, l, h, out, wts, ids, n); err != nil {
		return fmt.Errorf("%s: layer %d experts: %w", x.rb.Name, l, err)
	}
	return nil
}

// startDevice is start of a layer with device experts on the CPU backend:
// the CPU expert engine computes the experts it does not skip, the
// backend's MoE op this rank's share of the device experts, and the two
// are added (a layer wholly on the device: the op alone).
func (x *Experts) startDevice(l int, out, h backend.Tensor, w *Weights, wts, ids backend.Tensor, n int) error {
	be := x.rb.BE
	if w.NGPU == len(w.Gate) {
		if x.def != nil {
			x.def.begin(l) // defers nothing, as the layer before it
		}
		be.MoE(out, h, &w.OnGPU, wts, ids, n)
		return nil
	}
	if err := x.engine.start(x.rb, l, h, out, wts, ids, n); err != nil {
		return fmt.Errorf("%s: layer %d experts: %w", x.rb.Name, l, err)
	}
	if w.NShare > 0 {
		be.MoE(x.devOut, h, &w.OnGPU, wts, ids, n)
		be.Add(out, out, x.devOut, n)
	}
	return nil
}

// record hands layer l's expert picks (the first n rows of ids) to rec.
// It waits for the router: only while recording.
func (x *Experts) record(rec arch.ExpertRecorder, l int, ids backend.Tensor, n int) error {
	rd, ok := x.rb.BE.(interface {
		ReadI32(dst []int32, t backend.Tensor, n int) error
	})
	if !ok {
		return fmt.Errorf("%s: layer %d: recording expert picks needs a backend that reads I32 tensors", x.rb.Name, l)
	}
	k := 1
	if sh := ids.Shape(); len(sh) == 2 {
		k = sh[1]
	}
	if cap(x.idsHost) < n*k {
		x.idsHost = make([]int32, n*k)
	}
	x.idsHost = x.idsHost[:n*k]
	if err := rd.ReadI32(x.idsHost, ids, n*k); err != nil {
		return fmt.Errorf("%s: layer %d: reading expert picks: %w", x.rb.Name, l, err)
	}
	rec.Add(l, x.idsHost)
	return nil
}

// order returns the first MoE layer of layers (nil for dense ones; -1 when
// there is none) and, per layer, the next MoE layer after it (-1: none).
func order(layers []*Weights) (first int, next []int) {
	next = make([]int, len(layers))
	first = -1
	for l := len(layers) - 1; l >= 0; l-- {
		next[l] = first
		if layers[l] != nil {
			first = l
		}
	}
	return first, next
}

// join makes out, the output of the start of layer l, valid for the ops
// queued after it.
func (x *Experts) join(l int, out backend.Tensor, n int) error {
	if x.engine == nil {
		return nil
	}
	if err := x.engine.join(l, out, n); err != nil {
		return fmt.Errorf("%s: layer %d experts: %w", x.rb.Name, l, err)
	}
	return nil
}

// Close releases the engine's layers and threads, or a rank's layerwise
// prefill buffers.
func (x *Experts) Close() {
	if x == nil {
		return
	}
	if x.engine != nil {
		x.engine.close()
		x.engine = nil
	}
	x.lw.close()
	x.lw = nil
}

// attachLoRA checks the served expert LoRA (rb.Opts.LoRA.Expert) against
// the model and hands each MoE layer its factors (Weights.LoRA), which the
// CPU expert engine and the CPU backend's MoE op apply to every token.
// GPU-resident experts with expert LoRA are refused, as SGLang-KT does.
func attachLoRA(rb *runbase.Base, c *modelconfig.Config, layers []*Weights) error {
	set := rb.Opts.LoRA
	if set == nil || set.Expert == nil {
		return nil
	}
	moe := make([]bool, len(layers))
	for l, w := range layers {
		moe[l] = w != nil
		if w != nil && w.NGPU > 0 {
			return errors.New("--kt-expert-lora-path first supports CPU experts only. Set --kt-num-gpu-experts 0 (KT expert LoRA serving keeps every routed expert on the CPU)")
		}
	}
	a := set.Expert
	if err := a.CheckExperts(moe, c.NumExperts, c.HiddenSize, c.MoEIntermediateSize); err != nil {
		return err
	}
	for l, w := range layers {
		if w == nil {
			continue
		}
		el := a.Experts[l]
		w.LoRA = &backend.ExpertLoRA{Rank: el.Rank, Scale: a.Scale, GateA: el.GateA, GateB: el.GateB, UpA: el.UpA, UpB: el.UpB, DownA: el.DownA, DownB: el.DownB}
	}
	return nil
}

// bindPackedOnBackend makes the pack-quantized INT4 experts that Load left
// in host memory for the CPU expert engine backend weights of their bf16
// values (expertsource.PackedInt4BF16), for the backend's MoE op.
func bindPackedOnBackend(rb *runbase.Base, layers []*Weights) error {
	for _, w := range layers {
		if w == nil {
			continue
		}
		for e := range w.Gate {
			for _, p := range []struct {
				dst *backend.Tensor
				h   backend.Host
			}{{&w.Gate[e], w.HostGate[e]}, {&w.Up[e], w.HostUp[e]}, {&w.Down[e], w.HostDown[e]}} {
				if _, onHost := (*p.dst).(hostTensor); !onHost || !p.h.PackedInt4() {
					continue
				}
				h, err := expertsource.PackedInt4BF16(p.h)
				if err != nil {
					return err
				}
				if *p.dst, err = rb.BE.Weight(h); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// packedInt4 reports whether any layer's routed experts are pack-quantized
// INT4 (backend.Host.PackedInt4), which the CPU expert engine reads as they
// are and the backend's MoE op as their bf16 values.
func packedInt4(layers []*Weights) bool {
	for _, w := range layers {
		if w != nil && len(w.HostGate) > 0 && w.HostGate[0].PackedInt4() {
			return true
		}
	}
	return false
}
