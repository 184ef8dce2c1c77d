//go:build cgo

package cuda

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// WeightBuffers returns the device memory of t, a weight made by Weight:
// its data and, for a block-scaled FP8 weight, its float32 scales (a zero
// Buffer otherwise). ok is false when t is not a tensor of b. The
// layerwise prefill of the hybrid step refills such buffers in place.
func (b *Backend) WeightBuffers(t backend.Tensor) (data, scale Buffer, ok bool) {
	ct, ok := t.(*Tensor)
	if !ok || ct == nil {
		return Buffer{}, Buffer{}, false
	}
	if ct.fp8 != nil {
		scale = ct.fp8.scale
	}
	return ct.buf, scale, true
}

// WeightBytes returns the bytes Weight puts on the device for h: its data
// as stored and, for a block-scaled FP8 weight, its scales widened to
// float32 (nil otherwise). An error says h is in a form the GPU ops do not
// read (the dtypes Weight takes: F32, BF16, F16, block-scaled FP8).
func WeightBytes(h backend.Host) (data, scale []byte, err error) {
	if err := h.Check(); err != nil {
		return nil, nil, err
	}
	if h.FP8() {
		sc, err := widenScale(h.Scale)
		if err != nil {
			return nil, nil, err
		}
		return h.Data, sc, nil
	}
	switch h.DType {
	case tensor.F32, tensor.BF16, tensor.F16:
		return h.Data, nil, nil
	}
	return nil, nil, fmt.Errorf("tensor %s: dtype %s: the GPU MoE op reads F32, BF16, F16 or block-scaled FP8 experts", h.Name, h.DType)
}

// RefreshMoETable rewrites, at the same device addresses, the expert
// table (and FP8 scale table) the MoE op keeps for e, after the caller
// moved e's tensors between experts (GPU expert slots refilled by the
// hybrid step's dynamic expert update). The number of experts must not
// change, nor whether some are absent. CUDA graphs captured before read
// the new table when replayed. It waits for the stream first, so no queued
// op reads a half-written table. Without a table yet (no MoE call on e so
// far) there is nothing to do: the first call builds it from e.
func (b *Backend) RefreshMoETable(e *backend.Experts) error {
	t, ok := b.moe[e]
	if !ok {
		return nil
	}
	if err := b.s.Synchronize(); err != nil {
		return fmt.Errorf("MoE table: %w", err)
	}
	ptrs, nt, f8, ok := b.moeEntries(e)
	if !ok {
		return fmt.Errorf("MoE table: %w", b.Sync())
	}
	if nt.e != t.e || nt.partial != t.partial || nt.gdt != t.gdt || nt.udt != t.udt || nt.ddt != t.ddt || (f8.fp8 > 0) != (t.fp8 != nil) {
		return fmt.Errorf("MoE table: the experts changed form (%d experts, partial %v → %d, %v); only their places may change", t.e, t.partial, nt.e, nt.partial)
	}
	if err := Upload(b.d, t.ptrs, hostPtrs(ptrs)); err != nil {
		return fmt.Errorf("MoE table: %w", err)
	}
	if t.fp8 == nil {
		return nil
	}
	if f8.block != [2]int{t.fp8.bn, t.fp8.bk} {
		return fmt.Errorf("MoE table: FP8 block %v, was %v", f8.block, [2]int{t.fp8.bn, t.fp8.bk})
	}
	sp := make([]uint64, 3*t.e)
	copy(sp, f8.sptrs)
	if err := Upload(b.d, t.fp8.sptrs, hostPtrs(sp)); err != nil {
		return fmt.Errorf("MoE FP8 scale table: %w", err)
	}
	return nil
}

// ReserveMoE grows the MoE op's scratch to serve steps of up to pairs
// (token, expert) pairs of a layer of experts experts of hidden and inter
// (its grouped path's too, where such steps take it), now rather than on
// the first such step: a regrown buffer bumps the graph epoch, so a large
// step run after decode graphs were captured (the hybrid step's layerwise
// prefill) would otherwise make every bucket re-capture.
func (b *Backend) ReserveMoE(pairs, experts, hidden, inter int) error {
	if pairs <= 0 {
		return nil
	}
	p := int64(pairs)
	if !b.growBuf(&b.moeH, p*int64(inter)*4, "MoE gate/up scratch") || !b.growBuf(&b.moeY, p*int64(hidden)*4, "MoE expert output scratch") ||
		!b.growBuf(&b.moeIDs, p*4, "MoE masked ids") {
		return fmt.Errorf("MoE scratch for %d pairs: %w", pairs, b.Sync())
	}
	return b.reserveMoEGrouped(pairs, experts, hidden, inter)
}
