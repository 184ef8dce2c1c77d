package cpu

import (
	"fmt"
	"math"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/kvcache"
)

var _ backend.LinearAttention = (*Backend)(nil)

// linearState is the CPU backend's backend.LinearState: host memory in a
// kvcache.StateStore.
type linearState struct {
	shape backend.LinearShape
	store *kvcache.StateStore
}

func (s *linearState) Free(slot int)      { s.store.Free(slot) }
func (s *linearState) BytesPerSeq() int64 { return s.store.Shape().BytesPerSeq() }

// CopySlot implements backend.LinearState: a host memory copy.
func (s *linearState) CopySlot(dst, src int) error {
	if err := s.store.Copy(dst, src); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	return nil
}

// AllocLinearState implements backend.LinearAttention.
func (b *Backend) AllocLinearState(shape backend.LinearShape, maxSeqs int) (backend.LinearState, error) {
	d := shape.Delta
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("cpu: linear state: %w", err)
	}
	store, err := kvcache.NewStateStore(kvcache.StateShape{
		Layers: shape.Layers, ConvChannels: d.ConvChannels(), ConvKernel: shape.ConvKernel,
		KHeads: d.KHeads, VHeads: d.VHeads, KDim: d.KDim, VDim: d.VDim,
	}, maxSeqs)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return &linearState{shape: shape, store: store}, nil
}

// linearLayer returns the state of one layer of the sequence slot q runs in,
// taking memory for the slot if it has none.
func (b *Backend) linearLayer(ls *linearState, layer int, q backend.Seq, what string) *kvcache.LayerState {
	if b.refuse(backend.CheckLayer(what, layer, ls.shape.Layers)) {
		return nil
	}
	seq, err := ls.store.Get(q.Slot)
	if err != nil {
		b.fail("%s: %v", what, err)
		return nil
	}
	return &seq.Layers[layer]
}

// CausalConv1D implements backend.LinearAttention.
func (b *Backend) CausalConv1D(out, x, w backend.Tensor, st backend.LinearState, layer, n int) {
	if !b.ok() || b.stepMissing("CausalConv1D") {
		return
	}
	ls, isCPU := st.(*linearState)
	if !isCPU || ls == nil {
		b.fail("CausalConv1D: not a cpu linear state")
		return
	}
	ch, kern := ls.shape.Delta.ConvChannels(), ls.shape.ConvKernel
	ws := b.f32(w, ch*kern, "CausalConv1D weight")
	xs := b.f32(x, n*ch, "CausalConv1D x")
	os := b.f32(out, n*ch, "CausalConv1D out")
	if ws == nil || xs == nil || os == nil {
		return
	}
	if b.refuse(backend.CheckSpans("CausalConv1D", b.step.Seqs, n)) {
		return
	}
	for _, q := range b.step.Seqs {
		l := b.linearLayer(ls, layer, q, "CausalConv1D")
		if l == nil {
			return
		}
		if q.Pos == 0 {
			clear(l.Conv)
		}
		if err := CausalConv1D(xs[q.Start*ch:], q.Len, ch, ws[:ch*kern], kern, l.Conv, os[q.Start*ch:]); err != nil {
			b.fail("CausalConv1D: %v", err)
			return
		}
	}
}

// GatedDeltaRule implements backend.LinearAttention.
func (b *Backend) GatedDeltaRule(out, qkv, g, beta backend.Tensor, st backend.LinearState, layer, n int) {
	if !b.ok() || b.stepMissing("GatedDeltaRule") {
		return
	}
	ls, isCPU := st.(*linearState)
	if !isCPU || ls == nil {
		b.fail("GatedDeltaRule: not a cpu linear state")
		return
	}
	sh := ls.shape.Delta
	ch, kd, vd := sh.ConvChannels(), sh.KHeads*sh.KDim, sh.VHeads*sh.VDim
	xs := b.f32(qkv, n*ch, "GatedDeltaRule qkv")
	gs := b.f32(g, n*sh.VHeads, "GatedDeltaRule g")
	bs := b.f32(beta, n*sh.VHeads, "GatedDeltaRule beta")
	os := b.f32(out, n*vd, "GatedDeltaRule out")
	if xs == nil || gs == nil || bs == nil || os == nil || b.refuse(backend.CheckSpans("GatedDeltaRule", b.step.Seqs, n)) {
		return
	}
	if b.refuse(backend.CheckWidth("GatedDeltaRule", "qkv", b.t(qkv, "").cols(), ch)) {
		return
	}
	// Take every sequence's state first (allocation is not thread-safe),
	// then run (sequence, key head) pairs in parallel.
	states := make([]DeltaState, len(b.step.Seqs))
	for i, q := range b.step.Seqs {
		l := b.linearLayer(ls, layer, q, "GatedDeltaRule")
		if l == nil {
			return
		}
		if q.Pos == 0 {
			clear(l.S)
			clear(l.K)
			clear(l.V)
			clear(l.G)
		}
		states[i] = DeltaState{S: l.S, K: l.K, V: l.V, G: l.G, Rows: q.Pos % backend.DeltaChunkSize}
		if err := states[i].Check(sh); err != nil {
			b.fail("GatedDeltaRule: slot %d: %v", q.Slot, err)
			return
		}
	}
	isa := deltaISA()
	if !b.simd {
		isa = 0
	}
	seqs := b.step.Seqs
	b.pool.run(len(seqs)*sh.KHeads, 1, func(_, lo, hi int) {
		for w := lo; w < hi; w++ {
			q, kh := seqs[w/sh.KHeads], w%sh.KHeads
			base := q.Start * ch
			deltaGroup(isa, sh, &states[w/sh.KHeads], xs[base:], xs[base+kd:], xs[base+2*kd:], ch, ch,
				gs[q.Start*sh.VHeads:], bs[q.Start*sh.VHeads:], q.Len, kh, states[w/sh.KHeads].Rows, os[q.Start*vd:])
		}
	})
}

// DeltaGates implements backend.LinearAttention.
func (b *Backend) DeltaGates(g, beta, a, bb, aLog, dtBias backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	al := b.t(aLog, "DeltaGates A_log")
	dt := b.t(dtBias, "DeltaGates dt_bias")
	if al == nil || dt == nil {
		return
	}
	h := al.n
	if b.refuse(backend.CheckDeltaGates(al.arg(), dt.arg())) {
		return
	}
	as := b.f32(a, n*h, "DeltaGates a")
	bs := b.f32(bb, n*h, "DeltaGates b")
	gs := b.f32(g, n*h, "DeltaGates g")
	betas := b.f32(beta, n*h, "DeltaGates beta")
	if as == nil || bs == nil || gs == nil || betas == nil {
		return
	}
	for j := 0; j < h; j++ {
		negA := -float32(math.Exp(float64(al.at(j))))
		bias := dt.at(j)
		for i := 0; i < n; i++ {
			gs[i*h+j] = negA * softplus(as[i*h+j]+bias)
			betas[i*h+j] = sigmoid(bs[i*h+j])
		}
	}
}

// softplus is log(1+e^x), returning x itself above 20 as torch does.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// GatedRMSNorm implements backend.LinearAttention.
func (b *Backend) GatedRMSNorm(out, x, z, w backend.Tensor, eps float32, rows int) {
	if !b.ok() {
		return
	}
	wt := b.t(w, "GatedRMSNorm weight")
	if wt == nil || b.refuse(backend.CheckFloatWeight("GatedRMSNorm weight", wt.arg(), 1)) {
		return
	}
	d := wt.n
	ws := make([]float32, d)
	for i := range ws {
		ws[i] = wt.at(i)
	}
	xs := b.f32(x, rows*d, "GatedRMSNorm x")
	zs := b.f32(z, rows*d, "GatedRMSNorm z")
	os := b.f32(out, rows*d, "GatedRMSNorm out")
	if xs == nil || zs == nil || os == nil {
		return
	}
	b.pool.run(rows, 16, func(_, lo, hi int) {
		if err := GatedRMSNorm(xs[lo*d:hi*d], zs[lo*d:hi*d], ws, hi-lo, d, eps, os[lo*d:hi*d]); err != nil {
			b.fail("GatedRMSNorm: %v", err)
		}
	})
}

// SigmoidGate implements backend.LinearAttention.
func (b *Backend) SigmoidGate(out, x, gate backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	xt, gt := b.t(x, "SigmoidGate x"), b.t(gate, "SigmoidGate gate")
	if xt == nil || gt == nil {
		return
	}
	w, gw := xt.cols(), gt.cols()
	if b.refuse(backend.CheckGateWidth(gw, w)) {
		return
	}
	xs := b.f32(x, n*w, "SigmoidGate x")
	gs := b.f32(gate, n*gw, "SigmoidGate gate")
	os := b.f32(out, n*w, "SigmoidGate out")
	if xs == nil || gs == nil || os == nil {
		return
	}
	for i := 0; i < n; i++ {
		xr, or, gr := xs[i*w:(i+1)*w], os[i*w:(i+1)*w], gs[i*gw:(i+1)*gw]
		if gw == 1 {
			s := sigmoid(gr[0])
			for j, v := range xr {
				or[j] = v * s
			}
			continue
		}
		for j, v := range xr {
			or[j] = v * sigmoid(gr[j])
		}
	}
}
