package cpu

import "github.com/ktserve/kt/backend"

var _ backend.LoRAOps = (*Backend)(nil)

// LoRAAdd implements backend.LoRAOps.
func (b *Backend) LoRAAdd(out, d backend.Tensor, scale float32, adapter, n int) {
	if !b.ok() {
		return
	}
	ot, dt := b.t(out, "LoRAAdd out"), b.t(d, "LoRAAdd d")
	if ot == nil || dt == nil {
		return
	}
	w := ot.cols()
	if dt.cols() != w {
		b.fail("LoRAAdd: out is %d wide, d %d", w, dt.cols())
		return
	}
	os, ds := b.f32(out, n*w, "LoRAAdd out"), b.f32(d, n*w, "LoRAAdd d")
	if os == nil || ds == nil {
		return
	}
	if b.step == nil || len(b.rowSeq) < n {
		b.fail("LoRAAdd: no step set for %d rows", n)
		return
	}
	for i := 0; i < n; i++ {
		if adapter >= 0 && b.step.Seqs[b.rowSeq[i]].Adapter != adapter {
			continue
		}
		o, v := os[i*w:(i+1)*w], ds[i*w:(i+1)*w]
		for c := range o {
			o[c] += scale * v[c]
		}
	}
}
