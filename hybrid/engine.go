//go:build linux && amd64 && cgo

package hybrid

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/internal/settings"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/moe/expertsource"
	"github.com/ktserve/kt/moe/ktformat"
)

// engine runs the routed experts of every MoE layer on the CPU expert
// engine (moe/cpuexperts) instead of the backend's MoE op.
type engine struct {
	eng    *cpuexperts.Engine
	layers []*cpuexperts.Layer // per model layer; nil for dense layers
	batch  cpuexperts.Batch
	dbatch cpuexperts.Batch // the deferred task (expert deferral)
	def    *deferral        // expert deferral; nil when off
	defOut []float32        // CPU backend: the deferred output kept for the next MoE layer
	k, hid int
	from   string   // where the weights came from, for Path
	gpu    *gpuLink // the hybrid step: the rest of the model on the GPU; nil on the CPU backend
}

// hostSource serves a layer's expert matrices from the checkpoint bytes.
type hostSource struct{ w *Weights }

func (s hostSource) Matrix(e int, p cpuexperts.Proj) (cpuexperts.Matrix, error) {
	var h backend.Host
	switch p {
	case cpuexperts.Gate:
		h = s.w.HostGate[e]
	case cpuexperts.Up:
		h = s.w.HostUp[e]
	default:
		h = s.w.HostDown[e]
	}
	return expertsource.HostMatrix(h)
}

// newEngine builds the engine for method ("auto" means BF16 in place, or
// RAWINT4 for a pack-quantized INT4 checkpoint) with
// the pools, threads and weights rb.Opts gives (--kt-*). It returns an
// error saying why when the engine cannot serve this model or backend;
// for "auto" the caller then uses the backend's MoE op.
func newEngine(rb *runbase.Base, method string, c *modelconfig.Config, layers []*Weights) (*engine, error) {
	_, isCPU := rb.BE.(*cpu.Backend)
	if !isCPU && !Hybrid(rb) {
		return nil, fmt.Errorf("the model runs on %s: the routed experts stay there unless a CPU expert method is named (--kt-method with --kt-weight-path)", rb.BE.Name())
	}
	packed := packedInt4(layers)
	m := cpuexperts.BF16
	if packed {
		m = cpuexperts.RAWINT4 // the checkpoint's own INT4 codes
	}
	if method != "auto" {
		var err error
		if m, err = cpuexperts.ParseMethod(method); err != nil {
			return nil, err
		}
	}
	if m == cpuexperts.RAWINT4 && !packed {
		return nil, fmt.Errorf("RAWINT4 runs the routed experts of a pack-quantized INT4 checkpoint (compressed-tensors, as Kimi-K2-Thinking's) on their own codes; this checkpoint's are not packed: use AMXINT4, INT4_KGROUP or AMXINT8%s", alternatives(m, c, max(rb.Opts.ExpertPools, 1), false))
	}
	o := rb.Opts
	qd, err := openQuantDir(rb, m, c)
	if err != nil {
		return nil, err
	}
	if qd != nil {
		defer qd.Close() // NewLayerQuant copies the weights
		for l, w := range layers {
			if w != nil && !slices.Contains(qd.Manifest.Layers, l) {
				return nil, fmt.Errorf("--kt-weight-path %s has no experts for MoE layer %d (it holds layers %v)", o.ExpertWeightPath, l, qd.Manifest.Layers)
			}
		}
	}
	pools := o.ExpertPools
	if pools == 0 && qd != nil {
		pools = qd.Manifest.ThreadpoolCnt
	}
	pools = max(pools, 1)
	if err := cpuexperts.CheckShape(m, c.HiddenSize, c.MoEIntermediateSize, pools); err != nil {
		if method == "auto" {
			return nil, err // the caller falls back to the backend's op
		}
		return nil, fmt.Errorf("%w%s", err, alternatives(m, c, pools, packed))
	}
	threads := o.ExpertThreads
	if threads == 0 {
		threads = o.Threads
	}
	spinWait, err := settings.ExpertSpinWait.Get()
	if err != nil {
		return nil, err
	}
	if spinWait == 0 && !isCPU {
		spinWait = cpuexperts.HybridSpinWait // nothing else runs on the workers' cores
	}
	isa, err := settings.ExpertISA.Get()
	if err != nil {
		return nil, err
	}
	timed, err := settings.HybridTiming.Get()
	if err != nil {
		return nil, err
	}
	// the hybrid step's next-layer prefetch (prefetch.go): decode tasks
	// take their blocks on the workers that prefetched them, the
	// prediction's misses streamed into L2 meanwhile
	prefetch := !isCPU && prefetchOff(pools) == ""
	eng, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: threads, Pools: pools, NUMANodes: o.ExpertNUMANodes,
		MaxTokens: o.MaxBatchTokens, TopK: c.TopK, Experts: c.NumExperts, Hidden: c.HiddenSize, Intermediate: c.MoEIntermediateSize,
		ISA: cpuexperts.ISA(isa), SpinWait: spinWait, Trace: timed, OwnedDecode: prefetch, DecodeMissStream: prefetch})
	if err != nil {
		return nil, fmt.Errorf("CPU expert engine: %w", err)
	}
	x := &engine{eng: eng, layers: make([]*cpuexperts.Layer, len(layers)), k: c.TopK, hid: c.HiddenSize, from: "the checkpoint"}
	if !isCPU {
		if x.gpu, err = newGPULink(rb, x, layers, timed); err != nil {
			eng.Close()
			return nil, err
		}
		if t := o.GPUPrefillThreshold; t > 0 {
			skip := func(l int, gpu []bool) error { return setSkip(x.layers[l], gpu) }
			if x.gpu.lw, err = newLayerwise(rb, layers, t, o.DynamicExpertUpdate, string(m), c.TopK, skip); err != nil {
				x.gpu.close()
				eng.Close()
				return nil, err
			}
		}
	}
	if qd != nil {
		x.from = "kt quant weights in " + o.ExpertWeightPath
		if qd.Manifest.Format == ktformat.KTDirFormat {
			x.from = "KTransformers' converted weights in " + o.ExpertWeightPath
		}
	} else if !m.InPlace() {
		x.from = "the checkpoint, converted at load"
	}
	spec := cpuexperts.LayerSpec{Method: m, Experts: c.NumExperts, Hidden: c.HiddenSize, Intermediate: c.MoEIntermediateSize}
	if m == cpuexperts.RAWINT4 {
		spec.GroupSize = rb.Int4Group
		x.from = "the checkpoint's INT4 codes, repacked at load"
	}
	for l, w := range layers {
		if w == nil {
			continue
		}
		if qd != nil {
			x.layers[l], err = eng.NewLayerQuant(spec, qd.Layer(l))
		} else {
			x.layers[l], err = eng.NewLayer(spec, hostSource{w})
		}
		if err == nil && w.GPU != nil {
			err = x.layers[l].SetSkip(w.GPU) // the GPU computes those
		}
		if lo := w.LoRA; err == nil && lo != nil { // static expert LoRA (kern_lora.c)
			err = x.layers[l].SetLoRA(lo)
		}
		if err != nil {
			x.close()
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	return x, nil
}

// alternatives names the methods a model's shapes allow, for an error
// about method m (RAWINT4 only where the experts are packed INT4).
func alternatives(m cpuexperts.Method, c *modelconfig.Config, pools int, packed bool) string {
	var alt []string
	for _, a := range cpuexperts.MethodsFor(c.HiddenSize, c.MoEIntermediateSize, pools) {
		if a != m && (a != cpuexperts.RAWINT4 || packed) {
			alt = append(alt, string(a))
		}
	}
	if len(alt) == 0 {
		return "; no CPU expert method fits these shapes: run the routed experts with the backend's MoE op (no --kt-weight-path / --experts backend)"
	}
	return "; methods that fit: " + strings.Join(alt, ", ")
}

// openQuantDir opens o.ExpertWeightPath when it is a kt quant output or
// KTransformers' own converted experts (OpenKTDir) and
// checks it holds method m's weights for this model; it returns nil when
// the weights come from the model's checkpoint ("" or the model directory).
func openQuantDir(rb *runbase.Base, m cpuexperts.Method, c *modelconfig.Config) (*ktformat.QuantDir, error) {
	dir := rb.Opts.ExpertWeightPath
	if dir == "" || sameDir(dir, rb.Dir) {
		return nil, nil
	}
	var qd *ktformat.QuantDir
	if _, err := os.Stat(filepath.Join(dir, ktformat.QuantManifestName)); err == nil {
		if qd, err = ktformat.OpenQuantDir(dir); err != nil {
			return nil, err
		}
	} else {
		// no kt quant manifest: KTransformers' own converted files?
		qd, err = ktformat.OpenKTDir(dir, c.HiddenSize, c.MoEIntermediateSize)
		if errors.Is(err, ktformat.ErrNotKTDir) {
			return nil, fmt.Errorf("--kt-weight-path %s: not a kt quant output (no %s), not KTransformers' converted experts and not the model directory %s; kt reads BF16/FP8 experts from the model's own checkpoint",
				dir, ktformat.QuantManifestName, rb.Dir)
		}
		if err != nil {
			return nil, fmt.Errorf("--kt-weight-path %s: %w", dir, err)
		}
	}
	man := qd.Manifest
	bad := func(format string, a ...any) (*ktformat.QuantDir, error) {
		qd.Close()
		return nil, fmt.Errorf("--kt-weight-path %s: "+format, append([]any{dir}, a...)...)
	}
	if man.Method != m {
		flag := map[cpuexperts.Method]string{cpuexperts.AMXINT8: "int8", cpuexperts.AMXINT4: "int4"}
		fix := fmt.Sprintf("give the model directory %s as --kt-weight-path for %s", rb.Dir, m)
		if flag[m] != "" {
			fix = fmt.Sprintf("convert again with kt quant --method %s", flag[m])
		}
		return bad("holds %s weights (kt quant --method %s); run with --kt-method %s, or %s", man.Method, flag[man.Method], man.Method, fix)
	}
	if man.Experts != c.NumExperts || man.Hidden != c.HiddenSize || man.Intermediate != c.MoEIntermediateSize {
		return bad("converted for %d experts, hidden %d, intermediate %d; the model has %d, %d, %d",
			man.Experts, man.Hidden, man.Intermediate, c.NumExperts, c.HiddenSize, c.MoEIntermediateSize)
	}
	if p := rb.Opts.ExpertPools; p != 0 && p != man.ThreadpoolCnt {
		return bad("converted for %d thread pools but --kt-threadpool-count is %d: convert again with kt quant --threadpool-count %d, or run with --kt-threadpool-count %d",
			man.ThreadpoolCnt, p, p, man.ThreadpoolCnt)
	}
	return qd, nil
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// setDeferral turns expert deferral on (f non-nil) for the next steps.
func (x *engine) setDeferral(f *deferral) error {
	x.def = f
	if f == nil {
		return nil
	}
	if x.gpu != nil {
		return x.gpu.setDeferral(f)
	}
	x.defOut = make([]float32, x.eng.Config().MaxTokens*x.hid)
	return nil
}

// start computes layer l's routed experts for n tokens: on the CPU backend
// at once, from and into the backend's host memory; in the hybrid step it
// queues the work on the GPU's stream (gpuLink.start).
func (x *engine) start(rb *runbase.Base, l int, h, out, wts, ids backend.Tensor, n int) error {
	if x.gpu != nil {
		return x.gpu.start(l, out, h, wts, ids, n)
	}
	// the engine reads host memory: the backend's ops so far must be done
	if err := rb.Sync(); err != nil {
		return err
	}
	xs, is, ws, outs := h.(*cpu.Tensor).F32()[:n*x.hid], ids.(*cpu.Tensor).I32()[:n*x.k],
		wts.(*cpu.Tensor).F32()[:n*x.k], out.(*cpu.Tensor).F32()[:n*x.hid]
	b := &x.batch
	if x.def == nil {
		*b = cpuexperts.Batch{Tokens: n, TopK: x.k, X: xs, IDs: is, Weights: ws, Out: outs}
		return x.layers[l].Forward(b)
	}
	return x.deferredForward(l, xs, is, ws, outs, n)
}

// deferredForward is start on the CPU backend with expert deferral: the
// previous MoE layer's deferred output is copied into out and the
// immediate task adds onto it (as the hybrid step's pinned output slot
// holds it), then the deferred task writes the kept output for the next
// MoE layer. Both finish before it returns: on the CPU backend the
// model's own ops would compete with the engine for the cores.
func (x *engine) deferredForward(l int, xs []float32, is []int32, ws, outs []float32, n int) error {
	f := x.def
	d, pending := f.begin(l)
	kept := x.defOut[:n*x.hid]
	if pending {
		copy(outs, kept)
	}
	b := &x.batch
	*b = cpuexperts.Batch{Tokens: n, TopK: x.k, X: xs, IDs: is, Weights: ws, Out: outs, Incremental: pending}
	if d > 0 {
		f.split(is, ws, n, d)
		b.IDs = f.imm[:n*x.k]
	}
	if err := x.layers[l].Submit(b); err != nil {
		return err
	}
	if d > 0 {
		x.dbatch = cpuexperts.Batch{Tokens: n, TopK: x.k, X: xs, IDs: f.def[:n*x.k], Weights: ws, Out: kept}
		if err := x.layers[l].Submit(&x.dbatch); err != nil {
			_ = x.eng.Sync()
			return err
		}
	}
	f.pending = d > 0
	return x.eng.Sync()
}

// onCPU reports whether the engine serves the CPU backend (not the
// hybrid step).
func (x *engine) onCPU() bool { return x.gpu == nil }

// predict queues the prediction of layer l's expert picks during the MoE
// layer before it in the hybrid step (gpuLink.predict; a no-op otherwise).
func (x *engine) predict(l int, h, add, norm, router backend.Tensor, eps float32, n int) error {
	if x.gpu == nil {
		return nil
	}
	return x.gpu.predict(l, atNext, h, add, norm, router, eps, n)
}

// predictStart queues the prediction of the first MoE layer l's expert
// picks at the step's start in the hybrid step (gpuLink.predict; a no-op
// otherwise).
func (x *engine) predictStart(l int, h, norm, router backend.Tensor, eps float32, n int) error {
	if x.gpu == nil {
		return nil
	}
	return x.gpu.predict(l, atStart, h, nil, norm, router, eps, n)
}

// join makes layer l's output valid (the hybrid step; a no-op otherwise).
func (x *engine) join(l int, out backend.Tensor, n int) error {
	if x.gpu != nil {
		return x.gpu.join(l, out, n)
	}
	return nil
}

// hybridGraphs asks runbase for piecewise decode graphs for the hybrid
// step (gpuLink.graphSetup) and turns graphs off where it cannot have them
// (the op-by-op hand-off waits for the GPU inside the step).
func (x *engine) hybridGraphs(rb *runbase.Base) {
	if off := x.gpu.graphSetup(rb); off != "" {
		rb.DisableGraphs(off)
	}
}

// describe says where the experts run: method, kernels, threads and pools,
// and where the weights came from.
func (x *engine) describe() string {
	for _, L := range x.layers {
		if L != nil {
			m := L.Spec().Method
			cfg := x.eng.Config()
			where := ""
			if x.gpu != nil {
				where = fmt.Sprintf("; hybrid: the rest on %s, CPU experts between the GPU's ops; %s", x.gpu.be.Name(), x.gpu.placement())
				where += "; " + x.gpu.graphForm() + x.gpu.lw.describe() + x.gpu.describePrefetch()
			}
			return fmt.Sprintf("cpuexperts %s (%s; %d threads in %d pool(s); weights from %s%s)", m, x.eng.Kernels(m), cfg.Threads, cfg.Pools, x.from, where)
		}
	}
	return "cpuexperts"
}

// timing reports the hybrid hand-off times (settings.HybridTiming), or "".
func (x *engine) timing() string {
	if x.gpu == nil {
		return ""
	}
	s := x.gpu.timing.String()
	if s == "" {
		return ""
	}
	if planned, read := x.eng.Prefetched(); planned > 0 {
		s += fmt.Sprintf("\nprefetch: %.0f MB of predicted experts' weights, %.0f%% read while the GPU ran",
			float64(planned)/1e6, 100*float64(read)/float64(planned))
	}
	if t := x.eng.Trace(); t.Tasks > 0 { // the decode tasks' own split (settings.HybridTiming turns the trace on)
		s += "\n" + cpuexperts.TraceHeader + "\n" + t.Row("hybrid", 1)
	}
	return s
}

func (x *engine) close() {
	if x.gpu != nil {
		x.gpu.close()
	}
	for _, L := range x.layers {
		if L != nil {
			L.Close()
		}
	}
	x.eng.Close()
}

// layerwiseStats reports layerwise prefill's counts (the hybrid step).
func (x *engine) layerwiseStats() LayerwiseStats { return x.gpu.layerwiseStats() }
