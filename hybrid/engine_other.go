//go:build !(linux && amd64 && cgo)

package hybrid

import (
	"errors"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/modelconfig"
)

// engine is unavailable in this build: the backend's MoE op runs.
type engine struct{}

func newEngine(*runbase.Base, string, *modelconfig.Config, []*Weights) (*engine, error) {
	return nil, errors.New("the CPU expert engine needs linux/amd64 with cgo")
}

func (*engine) start(*runbase.Base, int, backend.Tensor, backend.Tensor, backend.Tensor, backend.Tensor, int) error {
	return errors.New("no CPU expert engine")
}

func (*engine) onCPU() bool { return true }

func (*engine) join(int, backend.Tensor, int) error { return errors.New("no CPU expert engine") }

func (*engine) predict(int, backend.Tensor, backend.Tensor, backend.Tensor, backend.Tensor, float32, int) error {
	return nil
}

func (*engine) predictStart(int, backend.Tensor, backend.Tensor, backend.Tensor, float32, int) error {
	return nil
}

func (*engine) describe() string { return "" }

func (*engine) timing() string { return "" }

func (*engine) setDeferral(*deferral) error { return nil }

func (*engine) hybridGraphs(*runbase.Base) {}

func (*engine) close() {}

func (*engine) layerwiseStats() LayerwiseStats { return LayerwiseStats{} }

// layerwise is unavailable in this build: it needs the CUDA backend.
type layerwise struct{}

func newLayerwise(*runbase.Base, []*Weights, int, bool, string, int, func(int, []bool) error) (*layerwise, error) {
	return nil, errors.New("layerwise GPU prefill needs linux/amd64 with cgo")
}

func (*layerwise) use(int) bool { return false }

func (*layerwise) forward(int, backend.Tensor, backend.Tensor, backend.Tensor, backend.Tensor, int) error {
	return errors.New("no layerwise GPU prefill")
}

func (*layerwise) describe() string { return "" }

func (*layerwise) statsNow() LayerwiseStats { return LayerwiseStats{} }

func (*layerwise) close() {}
