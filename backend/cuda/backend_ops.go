//go:build cgo

package cuda

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// blocks is ceil(n/per).
func blocks(n, per int) int { return (n + per - 1) / per }

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
	dt, _ := wcode(tt.dt)
	v, h := tt.shape[0], tt.shape[1]
	n := len(b.step.Tokens)
	o := b.f32(out, n*h, "Embed out")
	if o == nil || b.refuse(backend.CheckTokens(b.step.Tokens, v)) {
		return
	}
	b.check("Embed", b.d.launch(b.s, "m_embed", grid1(n), grid1(min(256, max(32, h))), 0, o.buf, tt.buf, dt, b.reg(rTokens), h))
}

// EmbedVocab implements backend.VocabEmbedder.
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
	dt, _ := wcode(tt.dt)
	v, h := tt.shape[0], tt.shape[1]
	n := len(b.step.Tokens)
	o := b.f32(out, n*h, "EmbedVocab out")
	if o == nil {
		return
	}
	b.check("EmbedVocab", b.d.launch(b.s, "m_embed_vocab", grid1(n), grid1(min(256, max(32, h))), 0, o.buf, tt.buf, dt, b.reg(rTokens), h, first, v))
}

// MatMul implements backend.Ops: out = x·wᵀ through cuBLASLt with float32
// output. For a bf16 (f16) weight the float32 activations are split into
// hi = bf16(x) and lo = bf16(x − hi), stacked as 2n rows of the scratch
// buffer, and one GEMM of 2n rows (weights read once) is summed back, which
// keeps about 16 more bits of the activations than rounding them once: the
// result tracks the float32 reference. An F32 weight runs an F32 GEMM.
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
	dt, _ := wcode(wt.dt)
	o, k := wt.shape[0], wt.shape[1]
	xs := b.f32(x, n*k, "MatMul x")
	os := b.f32(out, n*o, "MatMul out")
	if xs == nil || os == nil {
		return
	}
	if b.refuse(backend.CheckMatMul(xs.cols(), os.cols(), wt.arg())) {
		return
	}
	if n <= 0 || o == 0 || k == 0 {
		return
	}
	if wt.fp8 != nil {
		b.matmulFP8(os, xs, wt, n, o, k)
		return
	}
	m, mo := int64(n)*int64(k), int64(n)*int64(o)
	split := wt.dt != tensor.F32
	if split && b.gemvFits(wt, xs, n, k) {
		// A decode step's rows: one launch reading the weights once, the
		// split GEMM's arithmetic on the tensor cores (kernels/gemv.cu).
		kernel, threads, nb := "m_gemv_bf16", 256, blocks(o, 16)
		if nb <= 2*b.d.Info.SMs {
			// at most two blocks per SM: twice the warps in flight
			kernel, threads = "m_gemv_bf16_wide", 512
		}
		b.check("MatMul", b.d.launch(b.s, kernel, grid1(nb), grid1(threads), 0, os.buf, xs.buf, wt.buf, n, o, k))
		return
	}
	g := GemmArgs{M: n, N: o, K: k, A: xs.buf, B: wt.buf, D: os.buf, AType: wt.dt, BType: wt.dt, DType: tensor.F32}
	if split {
		if !b.growBuf(&b.gemmTmp, 8*mo, "MatMul split output") {
			return
		}
		g.M, g.D = 2*n, b.gemmTmp
		if b.scratch.Size < 4*m && !b.check("MatMul", b.ensureScratch(4*m)) {
			return
		}
		g.A = b.scratch
	}
	shape := gemmShape{g.M, o, k, wt.dt}
	if !b.gemmSupported(shape, g) {
		b.matmulKernel(os, xs, wt, dt, n, o, k)
		return
	}
	grid := grid1(int(blocks64(m, 256)))
	var err error
	switch {
	case wt.dt == tensor.F32:
	case wt.dt == tensor.BF16:
		err = b.d.launch(b.s, "m_split_bf16", grid, grid1(256), 0, b.scratch, xs.buf, m)
	default:
		err = b.d.launch(b.s, "m_split_f16", grid, grid1(256), 0, b.scratch, xs.buf, m)
	}
	if !b.check("MatMul", err) {
		return
	}
	if err := b.d.Gemm(b.s, g); err != nil {
		// cuBLASLt refused the call (a status, nothing was queued): use
		// the plain kernel for this shape from now on.
		b.gemmOK[shape] = false
		b.matmulKernel(os, xs, wt, dt, n, o, k)
		return
	}
	if split {
		b.check("MatMul", b.d.launch(b.s, "m_add_halves", grid1(int(blocks64(mo, 256))), grid1(256), 0, os.buf, b.gemmTmp, mo))
	}
}

// gemvMaxRows is the most activation rows m_gemv_bf16 takes (its two
// 8-column mma tiles hold the hi and lo parts of up to 8 rows).
const gemvMaxRows = 8

// gemvFits says whether MatMul of n rows can run m_gemv_bf16: bf16
// weights, at most gemvMaxRows rows, K a multiple of 8 and 16-byte
// aligned weight and activation rows (its 16-byte loads), a GPU with bf16
// mma (sm_80 or newer). The kernel computes what the split GEMM computes
// (hi and lo bf16 parts of the activations, products on the tensor cores,
// float32 sums), so decode rows and prefill chunks round alike.
func (b *Backend) gemvFits(wt, xs *Tensor, n, k int) bool {
	return !b.generalOnly && b.d.Info.Major >= 8 && wt.dt == tensor.BF16 && n <= gemvMaxRows && k%8 == 0 &&
		wt.buf.Ptr%16 == 0 && xs.buf.Ptr%16 == 0
}

// matmulKernel is MatMul without cuBLASLt (shapes it has no algorithm
// for): float32 activations times the weight as stored, a warp per output.
func (b *Backend) matmulKernel(os, xs, wt *Tensor, dt, n, o, k int) {
	b.check("MatMul", b.d.launch(b.s, "m_matmul", grid2(blocks(o, 8), n), grid1(256), 0, os.buf, xs.buf, wt.buf, dt, o, k))
}

func blocks64(n int64, per int64) int64 { return (n + per - 1) / per }

// normBlock picks a block size for a row of width d.
func normBlock(d int) int {
	switch {
	case d >= 1024:
		return 256
	case d >= 128:
		return 128
	}
	return 32
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
	dt, _ := wcode(wt.dt)
	d := wt.n
	xs, os := b.f32(x, rows*d, "RMSNorm x"), b.f32(out, rows*d, "RMSNorm out")
	if xs == nil || os == nil {
		return
	}
	switch {
	case b.generalOnly || !vecNorm(d, os.buf, xs.buf, wt.buf):
		b.check("RMSNorm", b.d.launch(b.s, "m_rmsnorm", grid1(rows), grid1(normBlock(d)), 0, os.buf, xs.buf, wt.buf, dt, d, eps))
	case d <= normWarpMax:
		b.check("RMSNorm", b.d.launch(b.s, "m_rmsnorm_warp", grid1(blocks(rows, 8)), grid1(256), 0, os.buf, xs.buf, wt.buf, dt, d, eps, rows))
	default:
		b.check("RMSNorm", b.d.launch(b.s, "m_rmsnorm_vec", grid1(rows), grid1(normBlock(d)), 0, os.buf, xs.buf, wt.buf, dt, d, eps))
	}
}

// normWarpMax is the widest row the warp-per-row norms take (4 float4
// groups per lane).
const normWarpMax = 512

// vecNorm reports whether the float4 norm kernels (m_rmsnorm_vec,
// m_rmsnorm_warp, m_gated_rmsnorm_warp) take rows of width d in these
// buffers: d % 4 == 0 and 16-byte aligned addresses; normBlock(d) threads
// then cover the row with at most 4 groups each.
func vecNorm(d int, bufs ...Buffer) bool {
	if d%4 != 0 {
		return false
	}
	for _, x := range bufs {
		if x.Ptr%16 != 0 {
			return false
		}
	}
	return true
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
	b.check("Rope", b.d.launch(b.s, "m_rope", grid2(n, heads), grid1(min(256, blocks(half, 32)*32)), 0,
		xs.buf, b.reg(rPos), heads, r.HeadDim, r.RotaryDim, float32(r.Theta)))
}

// Attention implements backend.Ops.
func (b *Backend) Attention(out, q, k, v backend.Tensor, kv *backend.KVCache, p *backend.Attn, n int) {
	if !b.ok() || b.stepMissing("Attention") {
		return
	}
	if b.refuse(backend.CheckAttention(p, kv, n, len(b.step.Tokens))) {
		return
	}
	if p.HeadDim <= 0 || p.HeadDim > 512 {
		b.fail("Attention: head dim %d outside 1..512", p.HeadDim)
		return
	}
	qw, kw := p.Heads*p.HeadDim, p.KVHeads*p.HeadDim
	qs, ks, vs := b.f32(q, n*qw, "Attention q"), b.f32(k, n*kw, "Attention k"), b.f32(v, n*kw, "Attention v")
	os := b.f32(out, n*qw, "Attention out")
	kc := b.f32(kv.K, kv.TotalPages*kv.PageSize*kw, "Attention K cache")
	vc := b.f32(kv.V, kv.TotalPages*kv.PageSize*kw, "Attention V cache")
	if qs == nil || ks == nil || vs == nil || os == nil || kc == nil || vc == nil {
		return
	}
	// The kernels index pages without bounds checks: check them here.
	if b.refuse(backend.CheckKVPages(b.step.Seqs, kv)) {
		return
	}
	ps := kv.PageSize
	if !b.check("Attention", b.d.launch(b.s, "m_kv_store", grid1(n), grid1(min(256, blocks(kw, 32)*32)), 0,
		kc.buf, vc.buf, ks.buf, vs.buf, b.reg(rPos), b.reg(rRowSeq), b.reg(rPageOff), b.reg(rPages), ps, kw)) {
		return
	}
	if b.attnSplitFits(p) {
		b.attnSplit(os, qs, kc, vc, p, ps, n)
		return
	}
	b.check("Attention", b.d.launch(b.s, "m_attention", grid2(n, p.Heads), grid1(128), 0,
		os.buf, qs.buf, kc.buf, vc.buf, b.reg(rPos), b.reg(rRowSeq), b.reg(rPageOff), b.reg(rPages), ps, p.Heads, p.KVHeads, p.HeadDim, p.Scale))
}

// attnMaxSplits is the most splits of a row's positions attnSplit uses
// (m_attn_merge's block of 256 threads holds one partial per thread).
const attnMaxSplits = 256

// attnSplitFits says whether Attention can run the split-K kernels of
// kernels/attnf32.cu: head dim 128 or 256 and at most 2048/D query heads
// per kv head (their register and shared-memory budget), on sm_80 or newer
// (cp.async).
func (b *Backend) attnSplitFits(p *backend.Attn) bool {
	d := p.HeadDim
	return !b.generalOnly && b.d.Info.Major >= 8 && (d == 128 || d == 256) && p.Heads%p.KVHeads == 0 && (p.Heads/p.KVHeads)*d <= 2048
}

// attnSmem is m_attn_split's dynamic shared memory for head dim d: the
// queries [2048/d][d], two K tiles [32][d+4] (cp.async double buffer) and
// the probabilities [32][2048/d], float32.
func attnSmem(d int) int { return (2048 + 2*32*(d+4) + 32*(2048/d)) * 4 }

// attnSplits is the number of splits of each row's positions: enough
// blocks (rows × kv heads × splits) for about eight per multiprocessor
// (a block walks its positions a tile at a time, so several per
// multiprocessor hide the loads' latency). It
// depends on the row count and the shape only, never on the contexts, so
// a captured decode step stays valid as they grow; the kernels divide each
// row's positions among the splits on the device.
func (b *Backend) attnSplits(n, kvHeads int) int {
	want := 8 * max(b.d.Info.SMs, 1)
	return min(max(blocks(want, n*kvHeads), 1), attnMaxSplits)
}

// attnSplit runs m_attn_split{128,256}, then with more than one split
// m_attn_merge{128,256} over the partials (a scratch buffer of fixed
// size for the shape).
func (b *Backend) attnSplit(os, qs, kc, vc *Tensor, p *backend.Attn, ps, n int) {
	d, heads := p.HeadDim, p.Heads
	s := b.attnSplits(n, p.KVHeads)
	acc, ml := Buffer{}, Buffer{}
	if s > 1 {
		rows := int64(n) * int64(heads) * int64(s)
		if !b.growBuf(&b.attnAcc, rows*int64(d)*4, "Attention split partials") || !b.growBuf(&b.attnML, rows*8, "Attention split max/sum") {
			return
		}
		acc, ml = b.attnAcc, b.attnML
	}
	split, merge := fmt.Sprintf("m_attn_split%d", d), fmt.Sprintf("m_attn_merge%d", d)
	if !b.check("Attention", b.d.launch(b.s, split, grid3(n, p.KVHeads, s), grid1(128), attnSmem(d),
		os.buf, acc, ml, qs.buf, kc.buf, vc.buf, b.reg(rPos), b.reg(rRowSeq), b.reg(rPageOff), b.reg(rPages), ps, heads, p.KVHeads, p.Scale, s)) {
		return
	}
	if s > 1 {
		b.check("Attention", b.d.launch(b.s, merge, grid2(n, heads), grid1(256), 0, os.buf, acc, ml, heads, s))
	}
}

// elementwise checks out, a, b over n rows of out's width and returns the
// element count.
func (b *Backend) elementwise(op string, n int, ts ...backend.Tensor) ([]*Tensor, int64) {
	ot := b.t(ts[0], op+" out")
	if ot == nil {
		return nil, 0
	}
	m := n * ot.cols()
	out := make([]*Tensor, len(ts))
	for i, x := range ts {
		if out[i] = b.f32(x, m, op); out[i] == nil {
			return nil, 0
		}
	}
	return out, int64(m)
}

// Add implements backend.Ops.
func (b *Backend) Add(out, a, bb backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	t, m := b.elementwise("Add", n, out, a, bb)
	if t == nil || m == 0 {
		return
	}
	b.check("Add", b.d.launch(b.s, "m_add", grid1(int(blocks64(m, 256))), grid1(256), 0, t[0].buf, t[1].buf, t[2].buf, m))
}

// SiLUMul implements backend.Ops.
func (b *Backend) SiLUMul(out, gate, up backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	t, m := b.elementwise("SiLUMul", n, out, gate, up)
	if t == nil || m == 0 {
		return
	}
	b.check("SiLUMul", b.d.launch(b.s, "m_silu_mul", grid1(int(blocks64(m, 256))), grid1(256), 0, t[0].buf, t[1].buf, t[2].buf, m))
}

// RouterTopK implements backend.Ops.
func (b *Backend) RouterTopK(wts, ids, logits backend.Tensor, k int, norm bool, n int) {
	if !b.ok() {
		return
	}
	lt, it := b.t(logits, "RouterTopK logits"), b.t(ids, "RouterTopK ids")
	if lt == nil || it == nil {
		return
	}
	e := lt.cols()
	if b.refuse(backend.CheckTopK(k, e)) {
		return
	}
	ls, ws := b.f32(logits, n*e, "RouterTopK logits"), b.f32(wts, n*k, "RouterTopK weights")
	if ls == nil || ws == nil {
		return
	}
	if b.refuse(backend.CheckRouterIDs(it.arg(), n*k)) {
		return
	}
	nm := 0
	if norm {
		nm = 1
	}
	if n <= 0 {
		return
	}
	var live uint64 // the step's rLive: padding rows route nowhere (0: no step)
	if b.step != nil {
		live = b.reg(rLive)
	}
	// A warp per row (one thread per row took ~150 µs for E = 128, k = 8:
	// the serial scans dominated a decode layer), the row in registers up
	// to 256 experts; rows wider than the shared memory the warp kernel
	// assumes keep the thread-per-row kernel.
	if !b.generalOnly && e <= 256 && k <= 32 {
		b.check("RouterTopK", b.d.launch(b.s, "m_router_topk_reg", grid1(blocks(n, 4)), grid1(128), 0, ws.buf, it.buf, ls.buf, n, e, k, nm, live))
		return
	}
	if smem := 20 * e; !b.generalOnly && smem <= 48<<10 {
		b.check("RouterTopK", b.d.launch(b.s, "m_router_topk_warp", grid1(blocks(n, 4)), grid1(128), smem, ws.buf, it.buf, ls.buf, n, e, k, nm, live))
		return
	}
	b.check("RouterTopK", b.d.launch(b.s, "m_router_topk", grid1(blocks(n, 128)), grid1(128), 0, ws.buf, it.buf, ls.buf, n, e, k, nm, live))
}

// moeTableFor uploads (once per layer) the device addresses of e's weights.
func (b *Backend) moeTableFor(e *backend.Experts) *moeTable {
	if t, ok := b.moe[e]; ok {
		return t
	}
	ptrs, t, f8, ok := b.moeEntries(e)
	if !ok {
		return nil
	}
	ft, ok := f8.table(b, len(e.Gate))
	if !ok {
		return nil
	}
	buf, err := b.alloc(int64(len(ptrs))*8, "MoE expert table")
	if !b.check("MoE", err) {
		return nil
	}
	if err := Upload(b.d, buf, hostPtrs(ptrs)); !b.check("MoE", err) {
		return nil
	}
	t.ptrs, t.fp8 = buf, ft
	b.moe[e] = t
	return t
}

// moeEntries checks e's expert weights and returns the table's addresses
// (u64 [E][3], 0 for an expert without weights here), the table's dtype
// codes and partial flag (ptrs and fp8 unset), and the FP8 scales seen.
func (b *Backend) moeEntries(e *backend.Experts) ([]uint64, *moeTable, *moeFP8, bool) {
	if b.refuse(backend.CheckExperts(e)) {
		return nil, nil, nil, false
	}
	ne, h, inter := len(e.Gate), e.Hidden, e.Inter
	ptrs := make([]uint64, 3*ne)
	codes := [3]int{-1, -1, -1}
	partial := false
	f8 := &moeFP8{}
	for ex := 0; ex < ne; ex++ {
		if e.Gate[ex] == nil && e.Up[ex] == nil && e.Down[ex] == nil {
			partial = true // served elsewhere (the CPU expert engine): null entries
			continue
		}
		for j, w := range []backend.Tensor{e.Gate[ex], e.Up[ex], e.Down[ex]} {
			t := b.t(w, "MoE weight")
			if t == nil {
				return nil, nil, nil, false
			}
			if !f8.add(b, ex, j, t, h, inter) {
				return nil, nil, nil, false
			}
			if b.refuse(backend.CheckExpertWeight(ex, t.arg(), h, inter)) {
				return nil, nil, nil, false
			}
			c, _ := wcode(t.dt)
			if codes[j] >= 0 && codes[j] != c {
				b.fail("MoE: expert %d weight %s is %s, other experts' differ", ex, t.label(), t.dt)
				return nil, nil, nil, false
			}
			codes[j] = c
			ptrs[3*ex+j] = t.buf.Ptr
		}
	}
	return ptrs, &moeTable{e: ne, gdt: codes[0], udt: codes[1], ddt: codes[2], partial: partial}, f8, true
}

// growBuf makes *buf hold at least n bytes (allocating on first use or
// growth only).
func (b *Backend) growBuf(buf *Buffer, n int64, what string) bool {
	if buf.Size >= n {
		return true
	}
	if !b.check(what, b.s.Synchronize()) {
		return false
	}
	b.free(*buf)
	*buf = Buffer{}
	b.epoch++
	nb, err := b.alloc(n, what)
	if !b.check(what, err) {
		return false
	}
	*buf = nb
	return true
}

// MoE implements backend.Ops: every (token, slot) pair runs its expert's
// gate/up and down projections reading the weights in place (addresses
// from the layer's expert table), then each token sums its pairs.
func (b *Backend) MoE(out, x backend.Tensor, e *backend.Experts, wts, ids backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	if e != nil && e.LoRA != nil {
		b.fail("MoE: expert LoRA runs on the CPU experts only (--kt-num-gpu-experts 0)")
		return
	}
	it := b.t(ids, "MoE ids")
	if it == nil {
		return
	}
	tab := b.moeTableFor(e)
	if tab == nil {
		return
	}
	h, inter, k := e.Hidden, e.Inter, it.cols()
	if b.refuse(backend.CheckExpertIDs(it.arg(), n, k)) {
		return
	}
	xs, os := b.f32(x, n*h, "MoE x"), b.f32(out, n*h, "MoE out")
	ws := b.f32(wts, n*k, "MoE weights")
	if xs == nil || os == nil || ws == nil {
		return
	}
	if n <= 0 {
		return
	}
	pairs := n * k
	if !b.growBuf(&b.moeH, int64(pairs)*int64(inter)*4, "MoE gate/up scratch") || !b.growBuf(&b.moeY, int64(pairs)*int64(h)*4, "MoE expert output scratch") {
		return
	}
	idb := it.buf
	if tab.partial {
		// experts without weights here (nil in e) are skipped as ids < 0
		if !b.growBuf(&b.moeIDs, int64(pairs)*4, "MoE masked ids") ||
			!b.check("MoE", b.d.launch(b.s, "m_moe_mask_ids", grid1(blocks(pairs, 256)), grid1(256), 0, b.moeIDs, idb, tab.ptrs, pairs, tab.e)) {
			return
		}
		idb = b.moeIDs
	}
	if tab.fp8 != nil {
		if b.moeFP8(tab, xs.buf, idb, pairs, h, inter, k) {
			b.check("MoE", b.d.launch(b.s, "m_moe_combine", grid2(n, blocks(h, 256)), grid1(256), 0, os.buf, b.moeY, ws.buf, idb, k, h, tab.e))
		}
		return
	}
	// prefill-sized steps over bf16 experts: each expert's rows as GEMMs
	// (moe_grouped.go); the per-pair kernels below if cuBLASLt refuses
	if b.moeGroupedFits(tab, pairs, h, inter) && (b.moeGroupedRun(os.buf, xs.buf, ws.buf, e, idb, n, k, tab.e) || !b.ok()) {
		return
	}
	// bf16 experts at the real models' sizes take the 16-byte-load kernels;
	// other dtypes and the tiny fixtures the general ones.
	if !b.generalOnly && tab.gdt == wtBF16 && tab.udt == wtBF16 && h%256 == 0 {
		if !b.check("MoE", b.d.launch(b.s, "m_moe_gateup_bf16", grid2(pairs, blocks(inter, 8)), grid1(256), 0,
			b.moeH, xs.buf, idb, tab.ptrs, h, inter, k, tab.e)) {
			return
		}
	} else if !b.check("MoE", b.d.launch(b.s, "m_moe_gateup", grid2(pairs, blocks(inter, 8)), grid1(256), h*4,
		b.moeH, xs.buf, idb, tab.ptrs, tab.gdt, tab.udt, h, inter, k, tab.e)) {
		return
	}
	if !b.generalOnly && tab.ddt == wtBF16 && inter%256 == 0 {
		if !b.check("MoE", b.d.launch(b.s, "m_moe_down_bf16", grid2(pairs, blocks(h, 8)), grid1(256), 0,
			b.moeY, b.moeH, idb, tab.ptrs, h, inter, tab.e)) {
			return
		}
	} else if !b.check("MoE", b.d.launch(b.s, "m_moe_down", grid2(pairs, blocks(h, 8)), grid1(256), inter*4,
		b.moeY, b.moeH, idb, tab.ptrs, tab.ddt, h, inter, tab.e)) {
		return
	}
	b.check("MoE", b.d.launch(b.s, "m_moe_combine", grid2(n, blocks(h, 256)), grid1(256), 0, os.buf, b.moeY, ws.buf, idb, k, h, tab.e))
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
	os := b.f32(out, count*d, "GatherRows out")
	xs := b.f32(x, len(b.step.Tokens)*d, "GatherRows x")
	if os == nil || xs == nil || count == 0 {
		return
	}
	b.check("GatherRows", b.d.launch(b.s, "m_gather_rows", grid1(count), grid1(min(256, blocks(d, 32)*32)), 0, os.buf, xs.buf, b.reg(rOutRows), first, d))
}

// Read implements backend.Ops: waits for queued work and copies the first
// rows rows of t to dst.
func (b *Backend) Read(dst []float32, t backend.Tensor, rows int) error {
	ct := b.t(t, "Read")
	if ct == nil {
		return b.Sync()
	}
	m := rows * ct.cols()
	src := b.f32(t, m, "Read")
	if src == nil || !b.ok() {
		return b.Sync()
	}
	if b.refuse(backend.CheckRead(len(dst), m)) {
		return b.Sync()
	}
	if err := b.s.Synchronize(); err != nil {
		b.check("Read", err)
		return b.Sync()
	}
	if err := Download(b.d, dst[:m], src.buf); err != nil {
		b.check("Read", err)
		return b.Sync()
	}
	return nil
}

// ReadI32 copies the first n elements of an I32 tensor to host memory
// (the hybrid step's routed expert ids).
func (b *Backend) ReadI32(dst []int32, t backend.Tensor, n int) error {
	ct := b.t(t, "ReadI32")
	if ct == nil || !b.ok() {
		return b.Sync()
	}
	if ct.dt != tensor.I32 || ct.n < n || len(dst) < n {
		return fmt.Errorf("cuda: ReadI32: %s holds %d %s elements, need %d I32", ct.label(), ct.n, ct.dt, n)
	}
	if err := b.s.Synchronize(); err != nil {
		return err
	}
	return Download(b.d, dst[:n], ct.buf)
}

func grid3(x, y, z int) dim3 { return dim3{uint32(x), uint32(y), uint32(z)} }
