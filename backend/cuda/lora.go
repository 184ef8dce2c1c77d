//go:build cgo

package cuda

import "github.com/ktserve/kt/backend"

var _ backend.LoRAOps = (*Backend)(nil)

// LoRAAdd implements backend.LoRAOps: one kernel adds scale·d to the rows
// of out whose sequence's adapter (the step's per-row adapter ids, copied
// by SetStep) is adapter, every row when adapter < 0.
func (b *Backend) LoRAAdd(out, d backend.Tensor, scale float32, adapter, n int) {
	if !b.ok() || b.stepMissing("LoRAAdd") {
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
	if n > len(b.step.Tokens) {
		b.fail("LoRAAdd: %d rows, the step has %d", n, len(b.step.Tokens))
		return
	}
	t, m := b.elementwise("LoRAAdd", n, out, d)
	if t == nil || m == 0 {
		return
	}
	b.check("LoRAAdd", b.d.launch(b.s, "m_lora_add", grid1(int(blocks64(m, 256))), grid1(256), 0,
		t[0].buf, t[1].buf, b.reg(rRowAdapter), scale, adapter, w, m))
}
