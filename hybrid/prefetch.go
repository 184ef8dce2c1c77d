//go:build linux && amd64 && cgo

package hybrid

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/tensor"
)

// predictor is the hybrid step's expert prefetch. While the CPU computes
// MoE layer l's routed experts, the GPU, otherwise idle then, applies the
// next MoE layer's router to what it has of that layer's input (the
// residual after layer l's attention plus its shared expert: all but the
// routed experts' share) and copies the router logits to pinned memory;
// the host picks their top k while layer l's task runs (after it, with
// expert deferral), and once the task is done it queues an engine prefetch
// task (cpuexperts.Layer.Prefetch) of those experts, which reads their
// weights into the caches of the workers that will compute them while the
// GPU runs the next layer's attention; in the next layer's task each
// worker runs its blocks of the prefetched experts first while its kernels
// stream its other blocks, the prediction's misses, into L2
// (cpuexperts.Config.DecodeMissStream). The step's first MoE layer has no
// MoE layer before it: when it is layer 0 its prediction is made at the
// step's start (Experts.StepStart), from the residual entering it, before
// its attention, and its hand-off reads it and queues the prefetch before
// it waits for the layer's copies, so that the engine reads the predicted
// weights while the GPU runs the rest of that piece. A wrong prediction
// costs memory bandwidth in time the engine is idle, and the prefetch
// stops as soon as the layer's task is queued.
type predictor struct {
	slots        [2]predSlot // atStart, atNext
	h, x, scores backend.Tensor
	// the predictions queued since the last hand-off was made: at the
	// step's start and for the next layer (the layer and its tokens; 0:
	// none)
	start, startN, next, nextN int
	// held keeps the next layer's predicted ids from an ahead hand-off's
	// first part to its second
	held []int32
	// prefetched holds, with settings.HybridTiming, each layer's last
	// prefetched ids until its hand-off compares them with the picks
	// (empty: none)
	prefetched [][]int32
}

// Prediction points of the hybrid step's expert prefetch, each with its
// own slot (predSlot): both predictions of a step's first piece are in
// flight together.
const (
	atStart = iota // at the step's start, for the first MoE layer: read before its hand-off waits for the layer
	atNext         // during the previous MoE layer's CPU experts: read after its hand-off submitted them
)

// predSlot is one prediction's pinned router logits, the event recorded
// after their copy, and the ids the host picks from them.
type predSlot struct {
	ev     *cuda.Event      // recorded after the logits' copy
	pin    *cuda.HostBuffer // f32 [predictMaxTokens][experts]: the router logits
	logits []float32
	ids    []int32 // the host's top k of them
}

// predictMaxTokens is the most tokens a step may have for the hybrid step
// to predict and prefetch its experts. The window (the next layer's
// attention on the GPU, ~65 µs) reads about one token's predicted gate/up
// blocks, and a step of n tokens picks up to n·k experts; kt serve at 8
// concurrent requests measured slower with the prefetch on, so only
// one-token steps take it.
const predictMaxTokens = 1

// prefetchOff says why the hybrid step of an engine with pools worker
// pools runs without the prefetch ("" when it prefetches): the prefetch
// reads each block on the worker that computes it, which only one-pool
// decode tasks arrange (reading the weights on whichever worker decoded
// slower than no prefetch).
func prefetchOff(pools int) string {
	if pools > 1 {
		return fmt.Sprintf("%d expert pools", pools)
	}
	return ""
}

// newPredictor allocates the predictor's buffers (nil, nil when
// prefetchOff says so; g.predOff then says why).
func newPredictor(g *gpuLink) (*predictor, error) {
	if off := prefetchOff(g.x.eng.Config().Pools); off != "" {
		g.predOff = off
		return nil, nil
	}
	p := &predictor{}
	be, T := g.be, predictMaxTokens
	var err error
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
		{&p.h, tensor.F32, []int{T, g.hid}}, {&p.x, tensor.F32, []int{T, g.hid}}, {&p.scores, tensor.F32, []int{T, g.experts}},
	} {
		if *a.dst, err = be.Alloc(a.dt, a.shape...); err != nil {
			p.close()
			return nil, fmt.Errorf("hybrid step prefetch: %w", err)
		}
	}
	return p, nil
}

// predict queues, in a piecewise decode step of n tokens, the prediction
// of MoE layer l's picks at point at: its router applied to x + add (add
// may be nil) normed with norm; atNext between the start and the join of
// the MoE layer before layer l, atStart at the step's start for the first
// MoE layer (Experts.StepStart). Other steps predict nothing: their CPU
// experts run between the GPU's ops, with no idle time to fill.
func (g *gpuLink) predict(l, at int, x, add, norm, router backend.Tensor, eps float32, n int) error {
	p := g.pred
	if p == nil || n < 1 || n > predictMaxTokens || g.allGPU[l] || !g.pieceStep() {
		return nil
	}
	if add != nil {
		g.be.Add(p.x, x, add, n)
		x = p.x
	}
	// the logits go to the host, which picks the top k (topK): a GPU top-k
	// is a few µs of one warp's serial rounds, ahead of the attention for
	// the prediction at the step's start
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
// slot sl's pinned memory: with bf16 router weights and an f32 norm
// (what the models load) one kernel writes them there
// (cuda.Device.RouteLogits: no 1/rms factor, which the top k does not
// depend on); otherwise the backend's norm and product and a copy.
func (g *gpuLink) routeLogits(sl *predSlot, x, norm, router backend.Tensor, eps float32, n int) error {
	p := g.pred
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
	g.be.RMSNorm(p.h, x, norm, eps, n)
	g.be.MatMul(p.scores, p.h, router, n)
	lb, err := g.buf(p.scores, "predicted router logits", n*g.experts*4)
	if err != nil {
		return err
	}
	return g.be.Device().CopyHost(g.s, true, cuda.HostCopy{Host: sl.pin, Dev: lb, N: int64(n * g.experts * 4)})
}

// prefetch waits for the prediction at point at of layer l (n tokens)
// and queues the engine's prefetch of the predicted experts.
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
	if err := spin(sl.ev); err != nil {
		return nil, err
	}
	for t := 0; t < n; t++ {
		topK(sl.ids[t*g.k:(t+1)*g.k], sl.logits[t*g.experts:(t+1)*g.experts])
	}
	return sl.ids[:n*g.k], nil
}

// prefetchIDs queues the engine's prefetch of layer l's experts ids.
func (g *gpuLink) prefetchIDs(l int, ids []int32) {
	g.x.layers[l].Prefetch(ids)
	if g.timing != nil { // the ids are rewritten before layer l's hand-off reads its picks
		p := g.pred
		if p.prefetched == nil {
			p.prefetched = make([][]int32, len(g.x.layers))
		}
		p.prefetched[l] = append(p.prefetched[l][:0], ids...)
	}
}

// scorePrediction counts, with settings.HybridTiming, how many of layer
// l's picks (n tokens, on the host after the layer's copies: picks) its
// prefetched prediction named, and forgets the prediction.
func (g *gpuLink) scorePrediction(l, n int) {
	if g.timing == nil || g.pred == nil || l >= len(g.pred.prefetched) || len(g.pred.prefetched[l]) == 0 {
		return
	}
	p := g.pred
	_, _, ids, _ := g.slot(l)
	g.timing.predicted(l, g.k, p.prefetched[l], cuda.HostSlice[int32](ids)[:n*g.k])
	p.prefetched[l] = p.prefetched[l][:0]
}

// take returns, when a hand-off is made for layer l, the tokens of layer
// l's prediction at the step's start (sn 0: none) and the layer and tokens
// of the next-layer prediction (nn 0: none) queued since the last
// hand-off.
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

// topK writes to ids the indices of the len(ids) largest logits, largest
// first, ties to the lower index (the GPU router's order), in one pass; a
// NaN is never picked, and ids past the non-NaN logits are -1.
func topK(ids []int32, logits []float32) {
	var buf [64]float32
	vals := buf[:0]
	if len(ids) > len(buf) {
		vals = make([]float32, 0, len(ids))
	}
	for e, v := range logits {
		if v != v || (len(vals) == len(ids) && !(v > vals[len(vals)-1])) {
			continue
		}
		p := len(vals)
		for p > 0 && vals[p-1] < v {
			p--
		}
		if len(vals) < len(ids) {
			vals = append(vals, 0)
		}
		copy(vals[p+1:], vals[p:len(vals)-1])
		copy(ids[p+1:len(vals)], ids[p:len(vals)-1])
		vals[p], ids[p] = v, int32(e)
	}
	for j := len(vals); j < len(ids); j++ {
		ids[j] = -1
	}
}
