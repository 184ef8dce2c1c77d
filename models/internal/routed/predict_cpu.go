//go:build linux && amd64 && cgo

package routed

import (
	"fmt"
	"os"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/tensor"
)

// PrefetchEnv names the environment variable that chooses the hybrid
// step's next-layer expert prefetch (predictor): unset or "owned" (the
// default: each engine worker reads the gate/up blocks it will compute,
// cpuexperts.Config.OwnedDecode), "shared" (the workers read the predicted
// experts' weights in chunks, whoever computes them) or "0" (none).
const PrefetchEnv = "KT_HYBRID_PREFETCH"

// prefetchMode reads PrefetchEnv: "owned", "shared" or "off".
func prefetchMode() (string, error) {
	switch v := os.Getenv(PrefetchEnv); v {
	case "", "owned", "1":
		return "owned", nil
	case "shared":
		return v, nil
	case "0", "off":
		return "off", nil
	default:
		return "", fmt.Errorf("%s=%s: want owned (the default), shared or 0", PrefetchEnv, v)
	}
}

// predictMaxTokens is the most tokens a step may have for the hybrid step
// to predict and prefetch its experts: beyond a few tokens per expert the
// CPU experts are bound by arithmetic more than by memory.
const predictMaxTokens = 8

// predictor is the hybrid step's next-layer expert prefetch. At the start
// of a MoE layer, before its attention, the GPU applies the layer's router
// to the residual entering the layer (normed as the router's input is after
// the attention) and copies the top-k ids to pinned memory; the thread that
// runs the CPU experts waits for them and queues an engine prefetch task
// (cpuexperts.Layer.Prefetch), which reads those experts' weights into the
// workers' caches while the GPU runs the attention and the CPU would
// otherwise idle. On the 8-layer synthetic Qwen3.5 checkpoint the predicted
// ids are 62-95 % of the real picks on Gated DeltaNet layers and 26-28 % on
// the attention layers (docs/notes/hybrid.md); a wrong prediction costs
// memory bandwidth in time the engine is idle, and the prefetch stops as
// soon as the layer's task is queued.
type predictor struct {
	ev                    *cuda.Event
	pin                   *cuda.HostBuffer // i32 [predictMaxTokens][k]
	ids                   []int32
	h, logits, wts, idDev backend.Tensor
	queued                []int  // per model layer: tokens of the prediction the layer's hand-off reads (0: none)
	mode                  string // prefetchMode's
}

// newPredictor allocates the predictor's buffers (nil, nil when
// PrefetchEnv turns it off).
func newPredictor(g *gpuLink, nLayers int) (*predictor, error) {
	mode, err := prefetchMode()
	if err != nil || mode == "off" {
		return nil, err
	}
	p := &predictor{queued: make([]int, nLayers), mode: mode}
	be, T := g.be, predictMaxTokens
	if p.ev, err = be.Device().NewEvent(false); err != nil {
		return nil, fmt.Errorf("hybrid step prefetch: %w", err)
	}
	if p.pin, err = be.Device().AllocHost(int64(T * g.k * 4)); err != nil {
		p.close()
		return nil, fmt.Errorf("hybrid step prefetch: %w", err)
	}
	p.ids = cuda.HostSlice[int32](p.pin)
	for _, a := range []struct {
		dst   *backend.Tensor
		dt    tensor.DType
		shape []int
	}{
		{&p.h, tensor.F32, []int{T, g.hid}}, {&p.logits, tensor.F32, []int{T, g.experts}},
		{&p.wts, tensor.F32, []int{T, g.k}}, {&p.idDev, tensor.I32, []int{T, g.k}},
	} {
		if *a.dst, err = be.Alloc(a.dt, a.shape...); err != nil {
			p.close()
			return nil, fmt.Errorf("hybrid step prefetch: %w", err)
		}
	}
	return p, nil
}

// predict queues the prediction of layer l's expert picks for n tokens
// from x, the residual entering the layer (engine.predict).
func (g *gpuLink) predict(l int, x, norm, router backend.Tensor, eps float32, n int) error {
	p := g.pred
	if p == nil {
		return nil
	}
	p.queued[l] = 0
	if n < 1 || n > predictMaxTokens || g.allGPU[l] || g.lw.use(n) || g.graphStep() || g.waitMode == "stream" {
		return nil
	}
	g.be.RMSNorm(p.h, x, norm, eps, n)
	g.be.MatMul(p.logits, p.h, router, n)
	g.be.RouterTopK(p.wts, p.idDev, p.logits, g.k, false, n)
	ib, err := g.buf(p.idDev, "predicted expert ids", n*g.k*4)
	if err != nil {
		return err
	}
	if err := g.be.Device().CopyHost(g.s, true, g.memcpy, cuda.HostCopy{Host: p.pin, Dev: ib, N: int64(n * g.k * 4)}); err != nil {
		return err
	}
	if g.pieceStep() {
		err = p.ev.RecordExternal(g.s)
	} else {
		err = p.ev.Record(g.s)
	}
	if err != nil {
		return err
	}
	p.queued[l] = n
	return nil
}

// prefetch waits for the prediction queued for layer l (n tokens) and
// queues the engine's prefetch of the predicted experts.
func (g *gpuLink) prefetch(l, n int) error {
	p := g.pred
	if g.waitMode == "block" {
		if err := p.ev.Synchronize(); err != nil {
			return err
		}
	} else {
		for {
			done, err := p.ev.Done()
			if err != nil {
				return err
			}
			if done {
				break
			}
		}
	}
	g.x.layers[l].Prefetch(p.ids[:n*g.k])
	return nil
}

// queuedFor returns the tokens of the prediction queued for layer l (0:
// none), read when the layer's hand-off is made.
func (p *predictor) queuedFor(l int) int {
	if p == nil {
		return 0
	}
	return p.queued[l]
}

// describe says whether the step prefetches, for the expert path.
func (p *predictor) describe() string {
	if p == nil {
		return "; no next-layer expert prefetch (" + PrefetchEnv + "=0)"
	}
	return fmt.Sprintf("; next-layer expert prefetch at up to %d tokens (%s)", predictMaxTokens, p.mode)
}

// close frees the predictor's event and pinned buffer (the device
// tensors go with the backend).
func (p *predictor) close() {
	if p == nil {
		return
	}
	if p.ev != nil {
		_ = p.ev.Destroy()
	}
	if p.pin != nil {
		_ = p.pin.Free()
	}
}
