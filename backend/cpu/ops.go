package cpu

import (
	"fmt"
	"math"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// at returns element i of a BF16/F16/F32 tensor as float32.
func (t *Tensor) at(i int) float32 {
	switch t.dt {
	case tensor.F32:
		return t.f32[i]
	case tensor.BF16:
		return tensor.BF16ToF32(t.u16[i])
	case tensor.F16:
		return tensor.F16ToF32(t.u16[i])
	case tensor.F8E4M3:
		return t.fp8.at(i, t.cols())
	}
	return float32(math.NaN())
}

// row widens row r (width k) of a float tensor into dst.
func (t *Tensor) row(r, k int, dst []float32) {
	off := r * k
	switch t.dt {
	case tensor.F32:
		copy(dst[:k], t.f32[off:off+k])
	case tensor.BF16:
		for i, v := range t.u16[off : off+k] {
			dst[i] = tensor.BF16ToF32(v)
		}
	case tensor.F16:
		for i, v := range t.u16[off : off+k] {
			dst[i] = tensor.F16ToF32(v)
		}
	case tensor.F8E4M3:
		for i := range dst[:k] {
			dst[i] = t.fp8.at(off+i, k)
		}
	}
}

// Embed implements backend.Ops.
func (b *Backend) Embed(out, table backend.Tensor) {
	if !b.ok() || b.stepMissing("Embed") {
		return
	}
	tt := b.t(table, "Embed table")
	if tt == nil {
		return
	}
	if b.refuse(backend.CheckMatrix("Embed", "table", tt.arg())) {
		return
	}
	v, h := tt.shape[0], tt.shape[1]
	n := len(b.step.Tokens)
	o := b.f32(out, n*h, "Embed out")
	if o == nil || b.refuse(backend.CheckTokens(b.step.Tokens, v)) {
		return
	}
	for i, id := range b.step.Tokens {
		tt.row(int(id), h, o[i*h:(i+1)*h])
	}
}

// EmbedVocab implements backend.VocabEmbedder: a vocabulary shard's
// rows, zero rows for the tokens other ranks hold.
func (b *Backend) EmbedVocab(out, table backend.Tensor, first int) {
	if !b.ok() || b.stepMissing("EmbedVocab") {
		return
	}
	tt := b.t(table, "EmbedVocab table")
	if tt == nil {
		return
	}
	if b.refuse(backend.CheckMatrix("EmbedVocab", "table", tt.arg())) {
		return
	}
	v, h := tt.shape[0], tt.shape[1]
	n := len(b.step.Tokens)
	o := b.f32(out, n*h, "EmbedVocab out")
	if o == nil {
		return
	}
	for i, id := range b.step.Tokens {
		if r := int(id) - first; r >= 0 && r < v {
			tt.row(r, h, o[i*h:(i+1)*h])
		} else {
			clear(o[i*h : (i+1)*h])
		}
	}
}

func (b *Backend) stepMissing(op string) bool {
	if b.step == nil {
		b.fail("%s: no step set", op)
		return true
	}
	return false
}

// MatMul implements backend.Ops.
func (b *Backend) MatMul(out, x, w backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	wt := b.t(w, "MatMul weight")
	if wt == nil {
		return
	}
	if b.refuse(backend.CheckMatMulWeight(wt.arg())) {
		return
	}
	o, k := wt.shape[0], wt.shape[1]
	xs := b.f32(x, n*k, "MatMul x")
	os := b.f32(out, n*o, "MatMul out")
	if xs == nil || os == nil {
		return
	}
	if b.refuse(backend.CheckMatMul(b.t(x, "").cols(), b.t(out, "").cols(), wt.arg())) {
		return
	}
	b.matmul(os, o, xs, k, n, wt, k, o)
}

// matmul computes out[i*ldo+c] = x[i*ldx:] . w[c] for i < n, c < o, in
// parallel over blocks of output columns.
func (b *Backend) matmul(out []float32, ldo int, x []float32, ldx, n int, w *Tensor, k, o int) {
	b.mmJob = mmJob{b: b, out: out, ldo: ldo, x: x, ldx: ldx, n: n, w: w, k: k}
	b.pool.runJob(o, 16, &b.mmJob)
	b.mmJob = mmJob{} // drop references to the step's buffers
}

// mmJob is one matmul's parallel body over output columns [lo,hi).
type mmJob struct {
	b           *Backend
	out, x      []float32
	ldo, ldx, n int
	w           *Tensor
	k           int
}

func (j *mmJob) run(worker, lo, hi int) {
	const oBlock, tBlock = 64, 64
	for c0 := lo; c0 < hi; c0 += oBlock {
		c1 := min(c0+oBlock, hi)
		for t0 := 0; t0 < j.n; t0 += tBlock {
			t1 := min(t0+tBlock, j.n)
			j.b.mmBlock(worker, j.out[t0*j.ldo:], j.ldo, j.x[t0*j.ldx:], j.ldx, t1-t0, j.w, j.k, c0, c1)
		}
	}
}

func (b *Backend) mmBlock(worker int, out []float32, ldo int, x []float32, ldx, n int, w *Tensor, k, c0, c1 int) {
	if w.fp8 != nil {
		b.mmFP8Block(worker, out, ldo, x, ldx, n, w, k, c0, c1)
		return
	}
	if b.simd && mmSIMD(x, ldx, n, w, k, c0, c1, out, ldo) {
		return
	}
	buf := b.scratch(worker, k)
	for c := c0; c < c1; c++ {
		w.row(c, k, buf)
		for i := 0; i < n; i++ {
			xr := x[i*ldx : i*ldx+k]
			var s float32
			for j, v := range xr {
				s += v * buf[j]
			}
			out[i*ldo+c] = s
		}
	}
}

// scratch returns worker's scratch buffer of at least n floats.
func (b *Backend) scratch(worker, n int) []float32 {
	if cap(b.attnBuf[worker]) < n {
		b.attnBuf[worker] = make([]float32, max(n, 2*cap(b.attnBuf[worker]), 4096))
	}
	return b.attnBuf[worker][:n]
}

// RMSNorm implements backend.Ops.
func (b *Backend) RMSNorm(out, x, w backend.Tensor, eps float32, rows int) {
	if !b.ok() {
		return
	}
	wt := b.t(w, "RMSNorm weight")
	if wt == nil {
		return
	}
	if b.refuse(backend.CheckNormWeight("RMSNorm", wt.arg())) {
		return
	}
	d := wt.n
	xs := b.f32(x, rows*d, "RMSNorm x")
	os := b.f32(out, rows*d, "RMSNorm out")
	if xs == nil || os == nil {
		return
	}
	for r := 0; r < rows; r++ {
		xr, or := xs[r*d:(r+1)*d], os[r*d:(r+1)*d]
		var ss float32
		for _, v := range xr {
			ss += v * v
		}
		inv := float32(1 / math.Sqrt(float64(ss/float32(d)+eps)))
		for i, v := range xr {
			or[i] = wt.at(i) * (v * inv)
		}
	}
}

// Rope implements backend.Ops.
func (b *Backend) Rope(x backend.Tensor, r *backend.Rope, heads, n int) {
	if !b.ok() || b.stepMissing("Rope") {
		return
	}
	if b.refuse(backend.CheckRope(r, n, len(b.step.Pos))) {
		return
	}
	xs := b.f32(x, n*heads*r.HeadDim, "Rope x")
	if xs == nil {
		return
	}
	half := r.RotaryDim / 2
	inv := b.invFreq(r)
	cs := b.scratch(0, 2*half)
	cos, sin := cs[:half], cs[half:]
	for t := 0; t < n; t++ {
		pos := float32(b.step.Pos[t])
		for i := 0; i < half; i++ {
			a := float64(pos * inv[i])
			cos[i] = float32(math.Cos(a))
			sin[i] = float32(math.Sin(a))
		}
		for h := 0; h < heads; h++ {
			v := xs[(t*heads+h)*r.HeadDim:]
			for i := 0; i < half; i++ {
				x1, x2 := v[i], v[i+half]
				v[i] = x1*cos[i] - x2*sin[i]
				v[i+half] = x2*cos[i] + x1*sin[i]
			}
		}
	}
}

// invFreq caches the inverse frequencies of the last rope config used.
func (b *Backend) invFreq(r *backend.Rope) []float32 {
	if b.rope != *r {
		b.rope = *r
		b.ropeInv = r.InvFreq()
	}
	return b.ropeInv
}

// Add implements backend.Ops.
func (b *Backend) Add(out, a, bb backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	ot := b.t(out, "Add out")
	if ot == nil {
		return
	}
	m := n * ot.cols()
	os, as, bs := b.f32(out, m, "Add out"), b.f32(a, m, "Add a"), b.f32(bb, m, "Add b")
	if os == nil || as == nil || bs == nil {
		return
	}
	for i := range os {
		os[i] = as[i] + bs[i]
	}
}

// SiLUMul implements backend.Ops.
func (b *Backend) SiLUMul(out, gate, up backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	ot := b.t(out, "SiLUMul out")
	if ot == nil {
		return
	}
	m := n * ot.cols()
	os, gs, us := b.f32(out, m, "SiLUMul out"), b.f32(gate, m, "SiLUMul gate"), b.f32(up, m, "SiLUMul up")
	if os == nil || gs == nil || us == nil {
		return
	}
	siluMul(os, gs, us)
}

func siluMul(out, g, u []float32) {
	for i, v := range g {
		out[i] = v / (1 + float32(math.Exp(float64(-v)))) * u[i]
	}
}

// RouterTopK implements backend.Ops.
func (b *Backend) RouterTopK(wts, ids, logits backend.Tensor, k int, norm bool, n int) {
	if !b.ok() {
		return
	}
	lt := b.t(logits, "RouterTopK logits")
	it := b.t(ids, "RouterTopK ids")
	if lt == nil || it == nil {
		return
	}
	e := lt.cols()
	if b.refuse(backend.CheckTopK(k, e)) {
		return
	}
	ls := b.f32(logits, n*e, "RouterTopK logits")
	ws := b.f32(wts, n*k, "RouterTopK weights")
	if ls == nil || ws == nil {
		return
	}
	if b.refuse(backend.CheckRouterIDs(it.arg(), n*k)) {
		return
	}
	is := it.i32
	live := b.step.LiveRows(n)
	for t := 0; t < n; t++ {
		if t >= live { // a padding row routes nowhere
			clear(ws[t*k : (t+1)*k])
			for j := range k {
				is[t*k+j] = -1
			}
			continue
		}
		row := ls[t*e : (t+1)*e]
		mx := row[0]
		for _, v := range row {
			mx = max(mx, v)
		}
		var sum float32
		for _, v := range row {
			sum += float32(math.Exp(float64(v - mx)))
		}
		w, id := ws[t*k:(t+1)*k], is[t*k:(t+1)*k]
		// selection of the k largest logits (softmax is monotone);
		// ties keep the lower id first.
		for j := 0; j < k; j++ {
			best := -1
			for c, v := range row {
				taken := false
				for _, p := range id[:j] {
					if int(p) == c {
						taken = true
						break
					}
				}
				if !taken && (best < 0 || v > row[best]) {
					best = c
				}
			}
			id[j] = int32(best)
			w[j] = float32(math.Exp(float64(row[best]-mx))) / sum
		}
		if norm {
			var s float32
			for _, v := range w {
				s += v
			}
			for j := range w {
				w[j] /= s
			}
		}
	}
}

// GatherRows implements backend.Ops.
func (b *Backend) GatherRows(out, x backend.Tensor, first, count int) {
	if !b.ok() || b.stepMissing("GatherRows") {
		return
	}
	xt := b.t(x, "GatherRows x")
	if xt == nil {
		return
	}
	d := xt.cols()
	if b.refuse(backend.CheckGather(first, count, len(b.step.OutRows))) {
		return
	}
	rows := b.step.OutRows[first : first+count]
	os := b.f32(out, len(rows)*d, "GatherRows out")
	xs := b.f32(x, len(b.step.Tokens)*d, "GatherRows x")
	if os == nil || xs == nil {
		return
	}
	for j, r := range rows {
		copy(os[j*d:(j+1)*d], xs[int(r)*d:(int(r)+1)*d])
	}
}

// Read implements backend.Ops.
func (b *Backend) Read(dst []float32, t backend.Tensor, rows int) error {
	ct := b.t(t, "Read")
	if ct == nil {
		return b.Sync()
	}
	m := rows * ct.cols()
	src := b.f32(t, m, "Read")
	if src == nil {
		return b.Sync()
	}
	if b.refuse(backend.CheckRead(len(dst), m)) {
		return b.Sync()
	}
	copy(dst, src)
	return nil
}

// ReadI32 copies the first n elements of an I32 tensor (router expert ids)
// to dst.
func (b *Backend) ReadI32(dst []int32, t backend.Tensor, n int) error {
	ct := b.t(t, "ReadI32")
	if ct == nil {
		return b.Sync()
	}
	if ct.dt != tensor.I32 || len(ct.i32) < n || len(dst) < n {
		return fmt.Errorf("cpu: ReadI32: tensor holds %d %s elements, need %d I32", len(ct.i32), ct.dt, n)
	}
	copy(dst, ct.i32[:n])
	return nil
}
