package arch

import (
	"errors"
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/model"
)

// Devices lists the values Options.Device (--device) accepts.
var Devices = []string{"auto", "cuda", "cpu"}

// OpenBackend opens the backend o.Device names: the CPU for "" and "cpu";
// the GPU o.BaseGPUID with a pool of o.MemFractionStatic for "cuda"; for
// "auto" the GPU when one is usable, else the CPU. note says which, and for
// "auto" on the CPU why the GPU was not used.
func OpenBackend(o Options) (be backend.Backend, note string, err error) {
	onCPU := func(why string) (backend.Backend, string, error) {
		c := cpu.New(cpu.Options{Threads: o.Threads})
		return c, why + "running on " + c.Name(), nil
	}
	switch o.Device {
	case "", "cpu":
		return onCPU("")
	case "cuda", "auto":
		g, err := openGPU(o)
		if err == nil {
			return g, "running on " + g.Name(), nil
		}
		if o.Device == "cuda" {
			return nil, "", fmt.Errorf("--device cuda: %w", err)
		}
		return onCPU(fmt.Sprintf("GPU not used (%v); ", err))
	}
	return nil, "", fmt.Errorf("--device %q: want one of auto, cuda, cpu", o.Device)
}

// ownedRunner closes the backend Load opened along with the model; the
// runner's optional interfaces are found through Unwrap (model.As).
type ownedRunner struct {
	model.Runner
	be backend.Backend
}

func (r *ownedRunner) Close() error { return errors.Join(r.Runner.Close(), r.be.Close()) }

// Unwrap returns the wrapped runner (model.As).
func (r *ownedRunner) Unwrap() model.Runner { return r.Runner }

// loadOnDevice opens the backend o.Device picks and loads the model on it;
// with "auto", a model that fails to load on the GPU (it does not fit, say)
// is loaded on the CPU instead.
func loadOnDevice(dir string, fn LoadFunc, o Options) (model.Runner, error) {
	be, note, err := OpenBackend(o)
	if err != nil {
		return nil, err
	}
	o.Backend = be
	r, err := fn(dir, o)
	if err != nil && o.Device == "auto" {
		if onGPU(be) {
			be.Close()
			o.Device = "cpu"
			be, note, _ = OpenBackend(o)
			note = fmt.Sprintf("model not loaded on the GPU (%v); %s", err, note)
			o.Backend = be
			gpuErr := err
			if r, err = fn(dir, o); err != nil {
				// say both: the CPU may refuse what only the GPU serves
				// (layerwise prefill, say)
				err = fmt.Errorf("on the GPU: %v; on the CPU: %w", gpuErr, err)
			}
		}
	}
	if err != nil {
		be.Close()
		return nil, err
	}
	if o.Notify != nil {
		o.Notify(note)
	}
	return &ownedRunner{Runner: r, be: be}, nil
}

// HybridTiming returns what r's hybrid step measured of its hand-offs
// (KT_HYBRID_TIMING=1), or "".
func HybridTiming(r model.Runner) string {
	if p, ok := model.As[interface{ HybridTiming() string }](r); ok {
		return p.HybridTiming()
	}
	return ""
}

// LayerwiseSummary returns what r's layerwise GPU prefill and dynamic
// expert update did so far (--kt-gpu-prefill-token-threshold), or "".
func LayerwiseSummary(r model.Runner) string {
	if p, ok := model.As[interface{ LayerwiseSummary() string }](r); ok {
		return p.LayerwiseSummary()
	}
	return ""
}

// ExpertPath says what computes r's routed experts (the CPU expert engine
// with its method, kernels, threads and weights, or the backend's MoE op
// and why), or "" when the runner does not say.
func ExpertPath(r model.Runner) string {
	if p, ok := model.As[interface{ ExpertPath() string }](r); ok {
		return p.ExpertPath()
	}
	return ""
}
