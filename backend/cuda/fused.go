//go:build cgo

package cuda

import (
	"math"
	"unsafe"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/tensor"
)

// gemvGroupMax is how many products one m_gemv_bf16_group launch takes.
const gemvGroupMax = 4

// MatMulGroup implements backend.MatMulGrouper: when every product would
// take MatMul's decode GEMV (bf16 weights, split arithmetic, n ≤ 8 rows,
// the same K) and passes MatMul's checks, the group is one launch of
// m_gemv_bf16_group, each output bit-identical to m_gemv_bf16's (a lone
// MatMul of few blocks takes m_gemv_bf16_wide, whose K order differs);
// otherwise each product is an ordinary MatMul (which reports any error).
func (b *Backend) MatMulGroup(x backend.Tensor, n int, outs, ws []backend.Tensor) {
	if b.ok() && !b.gemvGroup(x, n, outs, ws) {
		for i, w := range ws {
			b.MatMul(outs[i], x, w, n)
		}
	}
}

// gemvGroup launches the grouped GEMV and reports true, or reports false
// having queued and recorded nothing.
func (b *Backend) gemvGroup(x backend.Tensor, n int, outs, ws []backend.Tensor) bool {
	if len(ws) < 2 || len(ws) > gemvGroupMax || len(outs) != len(ws) || n <= 0 {
		return false
	}
	xs := asTensor(x)
	if xs == nil {
		return false
	}
	// kernel arguments: x, n, K, then (out, w, O[, start]) per product
	args := make([]any, 0, 3+4*gemvGroupMax)
	args = append(args, xs.buf, n, 0)
	k, start := 0, 0
	for i := 0; i < gemvGroupMax; i++ {
		if i >= len(ws) {
			args = append(args, Buffer{}, Buffer{}, 0, start)
			continue
		}
		wt, os := asTensor(ws[i]), asTensor(outs[i])
		if wt == nil || os == nil || wt.fp8 != nil || wt.dt != tensor.BF16 || len(wt.shape) != 2 {
			return false
		}
		o, kk := wt.shape[0], wt.shape[1]
		if i == 0 {
			k = kk
		}
		if kk != k || o == 0 || k == 0 || !b.gemvFits(wt, xs, n, k) ||
			backend.CheckMatMulWeight(wt.arg()) != nil ||
			backend.CheckF32("MatMul x", xs.arg(), n*k) != nil || backend.CheckF32("MatMul out", os.arg(), n*o) != nil ||
			backend.CheckMatMul(xs.cols(), os.cols(), wt.arg()) != nil {
			return false
		}
		args = append(args, os.buf, wt.buf, o)
		if i > 0 {
			args = append(args, start)
		}
		start += blocks(o, 16)
	}
	args[2] = k
	b.check("MatMulGroup", b.d.launch(b.s, "m_gemv_bf16_group", grid1(start), grid1(256), 0, args...))
	return true
}

// AddRMSNorm implements backend.AddRMSNormer: one launch where x is
// exactly as wide as the norm — m_add_rmsnorm_vec where RMSNorm would take
// m_rmsnorm_vec, m_add_rmsnorm where it would take m_rmsnorm, so h is
// bit-identical to Add then RMSNorm — else (rows RMSNorm gives a warp
// each, or anything amiss) Add and RMSNorm.
func (b *Backend) AddRMSNorm(h, x, t, w backend.Tensor, eps float32, n int) {
	if !b.ok() {
		return
	}
	wt, xs, ts, hs := asTensor(w), asTensor(x), asTensor(t), asTensor(h)
	kernel := ""
	if wt != nil && xs != nil && ts != nil && hs != nil && n > 0 && xs.cols() == wt.n &&
		backend.CheckNormWeight("RMSNorm", wt.arg()) == nil && backend.CheckF32("Add", ts.arg(), n*wt.n) == nil &&
		backend.CheckF32("Add", xs.arg(), n*wt.n) == nil && backend.CheckF32("RMSNorm out", hs.arg(), n*wt.n) == nil {
		switch d := wt.n; {
		case b.generalOnly || !vecNorm(d, hs.buf, xs.buf, ts.buf, wt.buf):
			kernel = "m_add_rmsnorm"
		case d > normWarpMax:
			kernel = "m_add_rmsnorm_vec"
		}
	}
	if kernel == "" {
		b.Add(x, x, t, n)
		b.RMSNorm(h, x, w, eps, n)
		return
	}
	dt, _ := wcode(wt.dt)
	b.check("AddRMSNorm", b.d.launch(b.s, kernel, grid1(n), grid1(normBlock(wt.n)), 0, hs.buf, xs.buf, ts.buf, wt.buf, dt, wt.n, eps))
}

// asTensor is x as a CUDA tensor, or nil.
func asTensor(x backend.Tensor) *Tensor {
	t, _ := x.(*Tensor)
	return t
}

// Pick implements backend.Picker with m_pick, which reads each row's
// settings from the step's rPick region (SetStep: putPicks).
func (b *Backend) Pick(out, logits backend.Tensor, rows int) {
	if !b.ok() || rows <= 0 {
		return
	}
	lt := b.t(logits, "Pick logits")
	if lt == nil {
		return
	}
	V := lt.cols()
	ls, os := b.f32(logits, rows*V, "Pick logits"), b.f32(out, 2*rows, "Pick out")
	if ls == nil || os == nil {
		return
	}
	if rows > b.capT {
		b.fail("Pick of %d rows past the step's %d", rows, b.capT)
		return
	}
	b.check("Pick", b.d.launchPick(b.s, rows, os.buf, ls.buf, V, b.reg(rPick)))
}

// putPicks writes the picks' settings, one PickParams per output row,
// into h (the rPick region): zeros (greedy) past draws or where a draw is
// greedy.
func putPicks(h []int32, draws []model.Draw) {
	clear(h)
	if len(h) < pickInts {
		return
	}
	ps := unsafe.Slice((*PickParams)(unsafe.Pointer(unsafe.SliceData(h))), len(h)/pickInts)
	for r, d := range draws {
		if r < len(ps) {
			ps[r] = pickParams(d)
		}
	}
}

// pickParams is a draw as m_pick takes it: the temperature as its float32
// inverse and the filters as engine/sample's Sampler applies them.
func pickParams(d model.Draw) PickParams {
	if d.Greedy() {
		return PickParams{}
	}
	p := PickParams{InvT: float32(1 / d.Temperature), TopP: d.NucleusP(), U: d.U}
	if d.TopK > 0 {
		p.TopK = int32(min(d.TopK, math.MaxInt32))
	}
	if d.MinP > 0 {
		p.MinP = float32(d.MinP)
	}
	return p
}
