//go:build linux && amd64 && cgo

package routed

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/models/internal/runbase"
	"github.com/ktserve/kt/moe/cpuexperts"
)

// engine runs the routed experts of every MoE layer on the CPU expert
// engine (moe/cpuexperts) instead of the backend's MoE op.
type engine struct {
	eng    *cpuexperts.Engine
	layers []*cpuexperts.Layer // per model layer; nil for dense layers
	batch  cpuexperts.Batch
	k, hid int
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
	return cpuexperts.Matrix{DType: h.DType, Rows: h.Shape[0], Cols: h.Shape[1], Data: h.Data}, nil
}

// newEngine builds the engine for method ("auto" means BF16 in place).
// It returns (nil, reason) when the engine cannot serve this model or
// backend and the caller should use the backend's MoE op.
func newEngine(rb *runbase.Base, method string, c *modelconfig.Config, layers []*Weights) (*engine, error) {
	if _, isCPU := rb.BE.(*cpu.Backend); !isCPU {
		return nil, fmt.Errorf("the backend %s is not the CPU", rb.BE.Name())
	}
	m := cpuexperts.BF16
	if method != "auto" {
		var err error
		if m, err = cpuexperts.ParseMethod(method); err != nil {
			return nil, err
		}
	}
	eng, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: rb.Opts.Threads, MaxTokens: rb.Opts.MaxBatchTokens,
		TopK: c.TopK, Experts: c.NumExperts, Hidden: c.HiddenSize, Intermediate: c.MoEIntermediateSize})
	if err != nil {
		return nil, err
	}
	x := &engine{eng: eng, layers: make([]*cpuexperts.Layer, len(layers)), k: c.TopK, hid: c.HiddenSize}
	spec := cpuexperts.LayerSpec{Method: m, Experts: c.NumExperts, Hidden: c.HiddenSize, Intermediate: c.MoEIntermediateSize}
	for l, w := range layers {
		if w == nil {
			continue
		}
		if x.layers[l], err = eng.NewLayer(spec, hostSource{w}); err != nil {
			x.close()
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	return x, nil
}

// forward computes layer l's routed experts for n tokens on host memory.
func (x *engine) forward(l int, h, out, wts, ids backend.Tensor, n int) error {
	b := &x.batch
	*b = cpuexperts.Batch{Tokens: n, TopK: x.k,
		X: h.(*cpu.Tensor).F32()[:n*x.hid], IDs: ids.(*cpu.Tensor).I32()[:n*x.k],
		Weights: wts.(*cpu.Tensor).F32()[:n*x.k], Out: out.(*cpu.Tensor).F32()[:n*x.hid]}
	return x.layers[l].Forward(b)
}

// describe names the kernels in use.
func (x *engine) describe() string {
	for _, L := range x.layers {
		if L != nil {
			return "cpuexperts " + x.eng.Kernels(L.Spec().Method)
		}
	}
	return "cpuexperts"
}

func (x *engine) close() {
	for _, L := range x.layers {
		if L != nil {
			L.Close()
		}
	}
	x.eng.Close()
}
