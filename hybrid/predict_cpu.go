//go:build linux && amd64 && cgo

package hybrid

import (
	"fmt"
	"os"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/tensor"
)

// PrefetchEnv names the environment variable that, set to 0, turns off
// the hybrid step's next-layer expert prefetch (predictor).
const PrefetchEnv = "KT_HYBRID_PREFETCH"

// prefetchOff reports whether the hybrid step of an engine with pools
// worker pools runs without the prefetch, and why: PrefetchEnv=0, or more
// than one pool (the prefetch reads each block on the worker that computes
// it, which only one-pool decode tasks arrange; reading the weights on
// whichever worker, "shared", decoded slower than no prefetch on the device,
// session 16 calls 2-3).
func prefetchOff(pools int) (string, error) {
	switch v := os.Getenv(PrefetchEnv); v {
	case "", "1":
	case "0":
		return PrefetchEnv + "=0", nil
	default:
		return "", fmt.Errorf("%s=%s: want 1 (the default) or 0", PrefetchEnv, v)
	}
	if pools > 1 {
		return fmt.Sprintf("%d expert pools", pools), nil
	}
	return "", nil
}

// predictMaxTokens is the most tokens a step may have for the hybrid step
// to predict and prefetch its experts. The window (the next layer's
// attention on the GPU, ~65 µs) reads about one token's predicted gate/up
// blocks, and a step of n tokens picks up to n·k experts; on the device,
// kt serve at 8 concurrent requests measured lower with the prefetch on
// (session 16 call 6), so only one-token steps take it.
const predictMaxTokens = 1

// predictor is the hybrid step's next-layer expert prefetch. While the CPU
// computes MoE layer l's routed experts, the GPU, otherwise idle then,
// applies the next MoE layer's router to what it has of that layer's input
// (the residual after layer l's attention plus its shared expert: all but
// the routed experts' share) and copies the top-k ids to pinned memory; as
// soon as layer l's task is done, the thread that runs the CPU experts
// queues an engine prefetch task (cpuexperts.Layer.Prefetch) of those
// experts, which reads their weights into the workers' caches while the GPU
// runs the next layer's attention. The step's first MoE layer has no layer
// before it: its prediction (from the residual entering it) is made at its
// start and read before its hand-off. On the 8-layer synthetic Qwen3.5
// checkpoint the predicted ids are 51-87 % of the real picks on the Gated
// DeltaNet layers and 25-28 % on the attention layers (docs/notes/hybrid.md,
// session 16); a wrong prediction costs memory bandwidth in time the engine
// is idle, and the prefetch stops as soon as the layer's task is queued.
type predictor struct {
	slots        [2]predSlot // atStart, next
	h, x, logits backend.Tensor
	// the predictions queued since the last hand-off was made: at a layer's
	// start and for the next layer (the layer and its tokens; 0: none)
	start, startN, next, nextN int
	// prefetched holds, with TimingEnv=1, each layer's last prefetched ids
	// until its hand-off compares them with the picks (empty: none)
	prefetched [][]int32
	// held keeps the next layer's predicted ids from an ahead hand-off's
	// first part to its second (AheadEnv=1)
	held []int32
	// refine (PredictEnv=refine): layers after first are predicted again
	// at their start; early holds each layer's last prefetched earlier
	// prediction, refinedIDs (TimingEnv=1) the second one until scored
	refine            bool
	first             int
	early, refinedIDs [][]int32
	merged            []int32 // the refined prefetch's ids
}

// predSlot is one prediction's pinned router logits, the event recorded
// after their copy, and the ids the host picks from them.
type predSlot struct {
	ev     *cuda.Event
	pin    *cuda.HostBuffer // f32 [predictMaxTokens][experts]
	logits []float32
	ids    []int32
}

// newPredictor allocates the predictor's buffers for a model whose first
// MoE layer is first (nil, nil when prefetchOff says so; g.predOff then
// says why).
func newPredictor(g *gpuLink, first int) (*predictor, error) {
	off, err := prefetchOff(g.x.eng.Config().Pools)
	if err != nil || off != "" {
		g.predOff = off
		return nil, err
	}
	p := &predictor{}
	if p.refine, err = envChoice(PredictEnv, "next", "refine"); err != nil {
		return nil, err
	}
	p.first = first
	p.early, p.refinedIDs = make([][]int32, len(g.x.layers)), make([][]int32, len(g.x.layers))
	be, T := g.be, predictMaxTokens
	for i := range p.slots {
		sl := &p.slots[i]
		if sl.ev, err = be.Device().NewEvent(false); err == nil {
			sl.pin, err = be.Device().AllocHost(int64(T * g.experts * 4))
		}
		if err != nil {
			p.close()
			return nil, fmt.Errorf("hybrid step prefetch: %w", err)
		}
		sl.logits, sl.ids = cuda.HostSlice[float32](sl.pin), make([]int32, T*g.k)
	}
	for _, a := range []struct {
		dst   *backend.Tensor
		dt    tensor.DType
		shape []int
	}{
		{&p.h, tensor.F32, []int{T, g.hid}}, {&p.x, tensor.F32, []int{T, g.hid}}, {&p.logits, tensor.F32, []int{T, g.experts}},
	} {
		if *a.dst, err = be.Alloc(a.dt, a.shape...); err != nil {
			p.close()
			return nil, fmt.Errorf("hybrid step prefetch: %w", err)
		}
	}
	return p, nil
}

// predict queues, in a piecewise decode step of n tokens, the prediction
// of MoE layer l's picks from x (+ add when not nil) normed with norm, at
// point at (engine.predict). Other steps predict nothing: their CPU experts
// run between the GPU's ops, with no idle time to fill.
func (g *gpuLink) predict(l, at int, x, add, norm, router backend.Tensor, eps float32, n int) error {
	p := g.pred
	if p == nil {
		return nil
	}
	if n < 1 || n > predictMaxTokens || g.allGPU[l] || !g.pieceStep() || (at == atStart && l != p.first && !p.refine) {
		return nil
	}
	if add != nil {
		g.be.Add(p.x, x, add, n)
		x = p.x
	}
	// the logits go to the host, which picks the top k (topK): a GPU top-k
	// is a few µs of one warp's serial rounds, ahead of the attention for a
	// prediction at a layer's start
	sl := &p.slots[at]
	if err := g.routeLogits(sl, x, norm, router, eps, n); err != nil {
		return err
	}
	if err := sl.ev.RecordExternal(g.s); err != nil {
		return err
	}
	if at == atStart {
		p.start, p.startN = l, n
	} else {
		p.next, p.nextN = l, n
	}
	return nil
}

// routeLogits queues the router logits of x's n rows normed with norm into
// slot sl's pinned memory: with bf16 router weights and an f32 norm (what
// the models load) one kernel writes them there (cuda.Device.RouteLogits:
// no 1/rms factor, which the top k does not depend on); otherwise the
// backend's norm and product and a copy.
func (g *gpuLink) routeLogits(sl *predSlot, x, norm, router backend.Tensor, eps float32, n int) error {
	if router.DType() == tensor.BF16 && norm.DType() == tensor.F32 && x.DType() == tensor.F32 {
		xb, err := g.buf(x, "prediction input", n*g.hid*4)
		if err != nil {
			return err
		}
		nb, err := g.buf(norm, "prediction norm", g.hid*4)
		if err != nil {
			return err
		}
		wb, err := g.buf(router, "router weights", g.experts*g.hid*2)
		if err != nil {
			return err
		}
		hp, err := sl.pin.DevicePtr()
		if err != nil {
			return err
		}
		return g.be.Device().RouteLogits(g.s, hp, xb, nb, wb, n, g.experts, g.hid)
	}
	p := g.pred
	g.be.RMSNorm(p.h, x, norm, eps, n)
	g.be.MatMul(p.logits, p.h, router, n)
	lb, err := g.buf(p.logits, "predicted router logits", n*g.experts*4)
	if err != nil {
		return err
	}
	return g.be.Device().CopyHost(g.s, true, g.memcpy, cuda.HostCopy{Host: sl.pin, Dev: lb, N: int64(n * g.experts * 4)})
}

// prefetch waits for the prediction at point at of layer l (n tokens) and
// queues the engine's prefetch of the predicted experts.
func (g *gpuLink) prefetch(at, l, n int) error {
	ids, err := g.predicted(at, n)
	if err != nil {
		return err
	}
	g.prefetchIDs(l, ids)
	return nil
}

// predicted waits for the prediction at point at (n tokens) and returns
// its ids, the top k of each token's logits in the slot's pinned memory,
// which the next piece that records the slot's event rewrites (call it
// before that piece may run); the ids stay until the slot's next call.
func (g *gpuLink) predicted(at, n int) ([]int32, error) {
	sl := &g.pred.slots[at]
	if err := g.waitEvent(sl.ev); err != nil {
		return nil, err
	}
	for t := 0; t < n; t++ {
		topK(sl.ids[t*g.k:(t+1)*g.k], sl.logits[t*g.experts:(t+1)*g.experts])
	}
	return sl.ids[:n*g.k], nil
}

// refine waits for layer l's second prediction (at its start, n tokens)
// and requeues its prefetch with both (refined): the new task stops the
// earlier one, whose blocks it reads again from the caches.
func (g *gpuLink) refine(l, n int) error {
	ids, err := g.predicted(atStart, n)
	if err != nil {
		return err
	}
	p := g.pred
	p.merged = refined(p.merged[:0], ids, p.early[l])
	p.early[l] = p.early[l][:0] // this step's only
	g.x.layers[l].Prefetch(p.merged)
	if g.timing != nil {
		p.refinedIDs[l] = append(p.refinedIDs[l][:0], ids...)
	}
	return nil
}

// prefetchIDs queues the engine's prefetch of layer l's experts ids.
func (g *gpuLink) prefetchIDs(l int, ids []int32) {
	g.x.layers[l].Prefetch(ids)
	p := g.pred
	if p.refine {
		p.early[l] = append(p.early[l][:0], ids...)
	}
	if g.timing != nil { // the slot is rewritten before layer l's hand-off reads its picks
		if p.prefetched == nil {
			p.prefetched = make([][]int32, len(g.x.layers))
		}
		p.prefetched[l] = append(p.prefetched[l][:0], ids...)
	}
}

// scorePrediction counts, with TimingEnv=1, how many of layer l's picks
// (n tokens, on the host after the layer's copies: picks) its prefetched
// prediction named, and forgets the prediction.
func (g *gpuLink) scorePrediction(l, n int) {
	if g.timing == nil || g.pred == nil || l >= len(g.pred.prefetched) || len(g.pred.prefetched[l]) == 0 {
		return
	}
	p := g.pred
	g.timing.predicted(l, g.k, p.prefetched[l], g.picks(l, n), false)
	p.prefetched[l] = p.prefetched[l][:0]
	if len(p.refinedIDs[l]) > 0 {
		g.timing.predicted(l, g.k, p.refinedIDs[l], g.picks(l, n), true)
		p.refinedIDs[l] = p.refinedIDs[l][:0]
	}
}

// take returns, when a hand-off is made for layer l, the tokens of layer
// l's at-start prediction (0: none) and the layer and tokens of the
// next-layer prediction (nn 0: none) queued since the last hand-off.
func (p *predictor) take(l int) (sn, next, nn int) {
	if p == nil {
		return 0, 0, 0
	}
	if p.start == l {
		sn = p.startN
	}
	next, nn = p.next, p.nextN
	p.startN, p.nextN = 0, 0
	if next <= l { // queued during a layer with no hand-off (all its experts on the GPU): too late now
		nn = 0
	}
	return sn, next, nn
}

// describePrefetch says whether the step prefetches, for the expert path.
func (g *gpuLink) describePrefetch() string {
	if g.pred == nil {
		return "; no next-layer expert prefetch (" + g.predOff + ")"
	}
	return fmt.Sprintf("; next-layer expert prefetch in decode steps of up to %d token(s)", predictMaxTokens)
}

// close frees the predictor's events and pinned buffers (the device
// tensors go with the backend).
func (p *predictor) close() {
	if p == nil {
		return
	}
	for _, sl := range p.slots {
		if sl.ev != nil {
			_ = sl.ev.Destroy()
		}
		if sl.pin != nil {
			_ = sl.pin.Free()
		}
	}
}
