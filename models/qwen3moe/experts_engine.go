//go:build linux && amd64 && cgo

package qwen3moe

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/moe/cpuexperts"
)

// expertEngine runs the routed experts of every MoE layer on the CPU
// expert engine (moe/cpuexperts) instead of the backend's MoE op.
type expertEngine struct {
	eng    *cpuexperts.Engine
	layers []*cpuexperts.Layer // per model layer; nil for dense layers
	batch  cpuexperts.Batch
}

// hostSource serves a layer's expert matrices from the checkpoint bytes.
type hostSource struct{ gate, up, down []backend.Host }

func (s hostSource) Matrix(e int, p cpuexperts.Proj) (cpuexperts.Matrix, error) {
	var h backend.Host
	switch p {
	case cpuexperts.Gate:
		h = s.gate[e]
	case cpuexperts.Up:
		h = s.up[e]
	default:
		h = s.down[e]
	}
	return cpuexperts.Matrix{DType: h.DType, Rows: h.Shape[0], Cols: h.Shape[1], Data: h.Data}, nil
}

// newExpertEngine builds the engine for method ("auto" means BF16 in place).
// It returns (nil, reason) when the engine cannot serve this model or
// backend and the caller should use the backend's MoE op.
func newExpertEngine(r *Runner, method string) (*expertEngine, error) {
	if _, isCPU := r.rb.BE.(*cpu.Backend); !isCPU {
		return nil, fmt.Errorf("the backend %s is not the CPU", r.rb.BE.Name())
	}
	m := cpuexperts.BF16
	if method != "auto" {
		var err error
		if m, err = cpuexperts.ParseMethod(method); err != nil {
			return nil, err
		}
	}
	c := r.cfg
	eng, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: r.rb.Opts.Threads, MaxTokens: r.rb.Opts.MaxBatchTokens,
		TopK: c.NumExpertsPerTok, Experts: c.NumExperts, Hidden: c.HiddenSize, Intermediate: c.MoEIntermediateSize})
	if err != nil {
		return nil, err
	}
	x := &expertEngine{eng: eng, layers: make([]*cpuexperts.Layer, len(r.layers))}
	spec := cpuexperts.LayerSpec{Method: m, Experts: c.NumExperts, Hidden: c.HiddenSize, Intermediate: c.MoEIntermediateSize}
	for l := range r.layers {
		L := &r.layers[l]
		if !L.moe {
			continue
		}
		if x.layers[l], err = eng.NewLayer(spec, hostSource{L.hostGate, L.hostUp, L.hostDown}); err != nil {
			x.close()
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	return x, nil
}

// forward computes layer l's routed experts for n tokens on host memory.
func (x *expertEngine) forward(l int, h, out, wts backend.Tensor, ids backend.Tensor, n, k, hidden int) error {
	b := &x.batch
	*b = cpuexperts.Batch{Tokens: n, TopK: k,
		X: h.(*cpu.Tensor).F32()[:n*hidden], IDs: ids.(*cpu.Tensor).I32()[:n*k],
		Weights: wts.(*cpu.Tensor).F32()[:n*k], Out: out.(*cpu.Tensor).F32()[:n*hidden]}
	return x.layers[l].Forward(b)
}

// describe names the kernels in use.
func (x *expertEngine) describe() string {
	for _, L := range x.layers {
		if L != nil {
			return "cpuexperts " + x.eng.Kernels(L.Spec().Method)
		}
	}
	return "cpuexperts"
}

func (x *expertEngine) close() {
	for _, L := range x.layers {
		if L != nil {
			L.Close()
		}
	}
	x.eng.Close()
}
