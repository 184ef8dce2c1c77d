//go:build cgo

package cuda

import (
	"fmt"

	"github.com/ktserve/kt/backend"
)

// linearState is the CUDA backend's backend.LinearState: every slot's conv
// history and gated-delta-rule state, allocated once for all slots so the
// addresses never change.
type linearState struct {
	b       *Backend
	shape   backend.LinearShape
	maxSeqs int
	conv    Buffer // float32 [slots, layers, K-1, C]
	delta   Buffer // float32 [slots, layers, deltaLayerLen]: the chunked form, see deltaLayerLen
}

// deltaLayerLen is the float32 count of one (slot, layer) gated-delta-rule
// state in the chunked form the CPU backend keeps (cpu.DeltaState): the
// recurrent state at the last chunk boundary S [Hv, Dk, Dv], then the open
// chunk's normalised keys K [64, Hk, Dk], corrected values U [64, Hv, Dv]
// and cumulative log decays G [64, Hv]. kernels/gdn.cu (m_gdn_chunk)
// computes the same layout.
func deltaLayerLen(d backend.DeltaShape) int64 {
	c := int64(backend.DeltaChunkSize)
	return int64(d.StateLen()) + c*int64(d.KHeads*d.KDim) + c*int64(d.VHeads*d.VDim) + c*int64(d.VHeads)
}

// gdnChunkSmem is m_gdn_chunk's dynamic shared memory in bytes for
// segments of at most segcap rows (the layout at the top of the kernel).
func gdnChunkSmem(d backend.DeltaShape, segcap int) int {
	const c, cb = backend.DeltaChunkSize, 32
	return 4 * (d.KDim*(cb+1) + c*(d.KDim+1) + c*(cb+1) + segcap*(d.KDim+1) + segcap*(cb+1) + 2*segcap*(c+1) + 3*c)
}

// gdnDecodeSmem is m_gdn_decode's dynamic shared memory in bytes (the
// layout at the top of the kernel).
func gdnDecodeSmem(d backend.DeltaShape) int {
	const c, cb = backend.DeltaChunkSize, 32
	return 4 * (2*d.KDim + c*(cb+1) + 4*c + 2*8*cb)
}

// gdnDecodeMaxKDim is the largest key head size m_gdn_decode takes (16
// keys of a column per thread, in registers).
const gdnDecodeMaxKDim = 128

// decodeStep reports whether every sequence of the step has one row (a
// decode step), which the linear-attention ops run through the kernels
// specialised to it (the general ones when b.generalOnly). The choice
// depends on the step's shape only, so a captured decode graph replays it.
func (b *Backend) decodeStep() bool {
	if b.generalOnly || len(b.step.Seqs) == 0 {
		return false
	}
	for _, q := range b.step.Seqs {
		if q.Len != 1 {
			return false
		}
	}
	return true
}

func (s *linearState) convPerSlot() int64 {
	return int64(s.shape.Layers) * int64(s.shape.ConvKernel-1) * int64(s.shape.Delta.ConvChannels()) * 4
}

func (s *linearState) deltaPerSlot() int64 {
	return int64(s.shape.Layers) * deltaLayerLen(s.shape.Delta) * 4
}

// Free zeroes slot's state (a sequence starting at position 0 ignores its
// old state anyway).
func (s *linearState) Free(slot int) {
	if slot < 0 || slot >= s.maxSeqs || s.b.closed {
		return
	}
	c, d := s.convPerSlot(), s.deltaPerSlot()
	if c > 0 {
		s.b.check("LinearState.Free", s.b.s.Memset(s.conv.Slice(int64(slot)*c, c), 0))
	}
	s.b.check("LinearState.Free", s.b.s.Memset(s.delta.Slice(int64(slot)*d, d), 0))
}

// CopySlot implements backend.LinearState: device-to-device copies of the
// slot's conv history and gated-delta-rule state, queued on the stream in
// order with the ops.
func (s *linearState) CopySlot(dst, src int) error {
	if dst < 0 || dst >= s.maxSeqs || src < 0 || src >= s.maxSeqs {
		return fmt.Errorf("cuda: linear state: copy from slot %d to %d outside [0,%d)", src, dst, s.maxSeqs)
	}
	if s.b.closed {
		return fmt.Errorf("cuda: linear state: the backend is closed")
	}
	if dst == src {
		return nil
	}
	c, d := s.convPerSlot(), s.deltaPerSlot()
	if c > 0 {
		if err := s.b.s.CopyDtoD(s.conv.Slice(int64(dst)*c, c), s.conv.Slice(int64(src)*c, c), c); err != nil {
			return fmt.Errorf("cuda: linear state: copying conv state: %w", err)
		}
	}
	if err := s.b.s.CopyDtoD(s.delta.Slice(int64(dst)*d, d), s.delta.Slice(int64(src)*d, d), d); err != nil {
		return fmt.Errorf("cuda: linear state: copying delta state: %w", err)
	}
	return nil
}

// BytesPerSeq is the device memory one sequence's state takes.
func (s *linearState) BytesPerSeq() int64 { return s.convPerSlot() + s.deltaPerSlot() }

var _ backend.LinearState = (*linearState)(nil)

// AllocLinearState implements backend.LinearAttention.
func (b *Backend) AllocLinearState(shape backend.LinearShape, maxSeqs int) (backend.LinearState, error) {
	if err := shape.Delta.Validate(); err != nil {
		return nil, fmt.Errorf("cuda: linear state: %w", err)
	}
	if shape.Layers < 0 || shape.ConvKernel < 1 || maxSeqs < 1 {
		return nil, fmt.Errorf("cuda: linear state: %d layers, conv kernel %d, %d sequences", shape.Layers, shape.ConvKernel, maxSeqs)
	}
	if sm, most := gdnChunkSmem(shape.Delta, backend.DeltaChunkSize), b.d.Info.MaxSharedOptin; most > 0 && sm > most {
		return nil, fmt.Errorf("cuda: linear state: key head size %d needs %d bytes of shared memory per block, the device allows %d", shape.Delta.KDim, sm, most)
	}
	st := &linearState{b: b, shape: shape, maxSeqs: maxSeqs}
	var err error
	if st.conv, err = b.alloc(int64(maxSeqs)*st.convPerSlot(), "conv1d state"); err != nil {
		return nil, fmt.Errorf("cuda: linear state: %w", err)
	}
	if st.delta, err = b.alloc(int64(maxSeqs)*st.deltaPerSlot(), "gated delta rule state"); err != nil {
		b.free(st.conv)
		return nil, fmt.Errorf("cuda: linear state: %w", err)
	}
	if err := b.s.Memset(st.conv, 0); err != nil {
		return nil, err
	}
	if err := b.s.Memset(st.delta, 0); err != nil {
		return nil, err
	}
	return st, nil
}

// linearSpans checks st, layer and the step's sequences against n rows.
func (b *Backend) linearSpans(op string, st backend.LinearState, layer, n int) *linearState {
	ls, isCUDA := st.(*linearState)
	if !isCUDA || ls == nil || ls.b != b {
		b.fail("%s: not this backend's linear state", op)
		return nil
	}
	if b.refuse(backend.CheckLayer(op, layer, ls.shape.Layers)) || b.refuse(backend.CheckSpans(op, b.step.Seqs, n)) {
		return nil
	}
	for _, q := range b.step.Seqs {
		if q.Slot >= ls.maxSeqs {
			b.fail("%s: sequence slot %d outside [0,%d)", op, q.Slot, ls.maxSeqs)
			return nil
		}
	}
	return ls
}

// CausalConv1D implements backend.LinearAttention.
func (b *Backend) CausalConv1D(out, x, w backend.Tensor, st backend.LinearState, layer, n int) {
	if !b.ok() || b.stepMissing("CausalConv1D") {
		return
	}
	ls := b.linearSpans("CausalConv1D", st, layer, n)
	if ls == nil {
		return
	}
	ch, kern := ls.shape.Delta.ConvChannels(), ls.shape.ConvKernel
	wt, wc := b.floatWeight(w, ch*kern, "CausalConv1D weight")
	xs, os := b.f32(x, n*ch, "CausalConv1D x"), b.f32(out, n*ch, "CausalConv1D out")
	if wt == nil || xs == nil || os == nil {
		return
	}
	T, S := len(b.step.Tokens), len(b.step.Seqs)
	if T == 0 || S == 0 {
		return
	}
	if b.decodeStep() {
		b.check("CausalConv1D", b.d.launch(b.s, "m_conv1d_decode", grid2(blocks(ch, 128), S), grid1(128), 0,
			os.buf, xs.buf, wt.buf, wc, ls.conv, layer, ls.shape.Layers, b.reg(rSeqStart), b.reg(rSeqPos), b.reg(rSeqSlot), ch, kern))
		return
	}
	if !b.check("CausalConv1D", b.d.launch(b.s, "m_conv1d", grid2(blocks(ch, 128), T), grid1(128), 0,
		os.buf, xs.buf, wt.buf, wc, ls.conv, layer, ls.shape.Layers, b.reg(rRowSeq), b.reg(rSeqStart), b.reg(rSeqPos), b.reg(rSeqSlot), ch, kern)) {
		return
	}
	b.check("CausalConv1D", b.d.launch(b.s, "m_conv_state", grid2(blocks(ch, 128), S), grid1(128), 0,
		ls.conv, xs.buf, layer, ls.shape.Layers, b.reg(rSeqStart), b.reg(rSeqLen), b.reg(rSeqPos), b.reg(rSeqSlot), ch, kern))
}

// GatedDeltaRule implements backend.LinearAttention in the chunked form
// of the CPU backend (64-token chunks aligned to positions, the state at
// the last boundary plus the open chunk's rows), so a prompt prefilled in
// pieces gives bit-identical results to one prefill: m_gdn_chunk computes
// outputs, S and the open rows' corrected values, then m_gdn_commit stores
// the open rows' keys and decays. A decode step (one row per sequence)
// runs m_gdn_decode instead, the same arithmetic in one grid.
func (b *Backend) GatedDeltaRule(out, qkv, g, beta backend.Tensor, st backend.LinearState, layer, n int) {
	if !b.ok() || b.stepMissing("GatedDeltaRule") {
		return
	}
	ls := b.linearSpans("GatedDeltaRule", st, layer, n)
	if ls == nil {
		return
	}
	sh := ls.shape.Delta
	ch, vd := sh.ConvChannels(), sh.VHeads*sh.VDim
	xs := b.f32(qkv, n*ch, "GatedDeltaRule qkv")
	gs, bs := b.f32(g, n*sh.VHeads, "GatedDeltaRule g"), b.f32(beta, n*sh.VHeads, "GatedDeltaRule beta")
	os := b.f32(out, n*vd, "GatedDeltaRule out")
	if xs == nil || gs == nil || bs == nil || os == nil {
		return
	}
	if b.refuse(backend.CheckWidth("GatedDeltaRule", "qkv", xs.cols(), ch)) {
		return
	}
	S := len(b.step.Seqs)
	if S == 0 {
		return
	}
	if sh.KDim <= gdnDecodeMaxKDim && b.decodeStep() {
		b.check("GatedDeltaRule", b.d.launch(b.s, "m_gdn_decode", dim3{uint32(sh.VHeads), uint32(blocks(sh.VDim, 32)), uint32(S)}, grid1(256), gdnDecodeSmem(sh),
			os.buf, xs.buf, gs.buf, bs.buf, ls.delta, layer, ls.shape.Layers, b.reg(rSeqStart), b.reg(rSeqPos), b.reg(rSeqSlot),
			ch, sh.KHeads, sh.VHeads, sh.KDim, sh.VDim))
		return
	}
	// Segments as long as the longest span (a decode step: one row), so
	// short steps take little shared memory and fit several blocks per SM.
	segcap := 1
	for _, q := range b.step.Seqs {
		segcap = max(segcap, min(q.Len, backend.DeltaChunkSize))
	}
	if !b.check("GatedDeltaRule", b.d.launch(b.s, "m_gdn_chunk", dim3{uint32(sh.VHeads), uint32(blocks(sh.VDim, 32)), uint32(S)}, grid1(128), gdnChunkSmem(sh, segcap),
		os.buf, xs.buf, gs.buf, bs.buf, ls.delta, layer, ls.shape.Layers, b.reg(rSeqStart), b.reg(rSeqLen), b.reg(rSeqPos), b.reg(rSeqSlot),
		ch, sh.KHeads, sh.VHeads, sh.KDim, sh.VDim, segcap)) {
		return
	}
	b.check("GatedDeltaRule", b.d.launch(b.s, "m_gdn_commit", grid2(sh.VHeads, S), grid1(32), sh.KDim*4,
		xs.buf, gs.buf, ls.delta, layer, ls.shape.Layers, b.reg(rSeqStart), b.reg(rSeqLen), b.reg(rSeqPos), b.reg(rSeqSlot),
		ch, sh.KHeads, sh.VHeads, sh.KDim, sh.VDim))
}

// DeltaGates implements backend.LinearAttention.
func (b *Backend) DeltaGates(g, beta, a, bb, aLog, dtBias backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	al, ac := b.floatWeight(aLog, 1, "DeltaGates A_log")
	dt, dc := b.floatWeight(dtBias, 1, "DeltaGates dt_bias")
	if al == nil || dt == nil {
		return
	}
	h := al.n
	if b.refuse(backend.CheckDeltaGates(al.arg(), dt.arg())) {
		return
	}
	as, bs := b.f32(a, n*h, "DeltaGates a"), b.f32(bb, n*h, "DeltaGates b")
	gs, betas := b.f32(g, n*h, "DeltaGates g"), b.f32(beta, n*h, "DeltaGates beta")
	if as == nil || bs == nil || gs == nil || betas == nil {
		return
	}
	m := int64(n) * int64(h)
	if m == 0 {
		return
	}
	b.check("DeltaGates", b.d.launch(b.s, "m_delta_gates", grid1(int(blocks64(m, 256))), grid1(256), 0,
		gs.buf, betas.buf, as.buf, bs.buf, al.buf, ac, dt.buf, dc, h, m))
}

// GatedRMSNorm implements backend.LinearAttention.
func (b *Backend) GatedRMSNorm(out, x, z, w backend.Tensor, eps float32, rows int) {
	if !b.ok() {
		return
	}
	wt, wc := b.floatWeight(w, 1, "GatedRMSNorm weight")
	if wt == nil {
		return
	}
	d := wt.n
	xs, zs, os := b.f32(x, rows*d, "GatedRMSNorm x"), b.f32(z, rows*d, "GatedRMSNorm z"), b.f32(out, rows*d, "GatedRMSNorm out")
	if xs == nil || zs == nil || os == nil {
		return
	}
	if !b.generalOnly && d <= normWarpMax && vecNorm(d, os.buf, xs.buf, zs.buf, wt.buf) {
		b.check("GatedRMSNorm", b.d.launch(b.s, "m_gated_rmsnorm_warp", grid1(blocks(rows, 8)), grid1(256), 0, os.buf, xs.buf, zs.buf, wt.buf, wc, d, eps, rows))
		return
	}
	b.check("GatedRMSNorm", b.d.launch(b.s, "m_gated_rmsnorm", grid1(rows), grid1(normBlock(d)), 0, os.buf, xs.buf, zs.buf, wt.buf, wc, d, eps))
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
	xs, gs, os := b.f32(x, n*w, "SigmoidGate x"), b.f32(gate, n*gw, "SigmoidGate gate"), b.f32(out, n*w, "SigmoidGate out")
	if xs == nil || gs == nil || os == nil {
		return
	}
	m := int64(n) * int64(w)
	if m == 0 {
		return
	}
	b.check("SigmoidGate", b.d.launch(b.s, "m_sigmoid_gate", grid1(int(blocks64(m, 256))), grid1(256), 0, os.buf, xs.buf, gs.buf, w, gw, m))
}
