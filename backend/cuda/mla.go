//go:build cgo

package cuda

import (
	"fmt"
	"slices"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

var (
	_ backend.MLA         = (*Backend)(nil)
	_ backend.GroupRouter = (*Backend)(nil)
)

// Multi-head latent attention (backend.MLA) runs the kernels of
// kernels/mla.cu: the step's cache entries are written first (mla_store),
// then the rows attend in latent space in chunks of at most mlaChunkRows
// rows, each through the latent query (mla_q_rope, mla_q_absorb), split-K
// attention over the paged latents (mla_attn, mla_merge) and the value
// rows (mla_v_up). Scratch buffers are sized by the chunk, so a prefill of
// any length needs no more than a fixed amount of memory; a decode step's
// launches depend on its row count only, so it can be captured as a graph.

// wtMLAFP8 is mla.cu's weight code of a block-scaled FP8 kv_b_proj
// (MLA_FP8).
const wtMLAFP8 = 3

// mlaTP is mla.cu's MLA_TP: positions per tile of mla_attn.
const mlaTP = 32

// mlaRB is mla.cu's MLA_RB: rows per block of mla_q_absorb and mla_v_up.
const mlaRB = 8

// mlaScratchBytes bounds the latent queries and attended latents of one
// chunk of rows (float32 [rows, heads, W] and [rows, heads, R]).
const mlaScratchBytes = 64 << 20

// mlaMaxSplits is the most splits of a row's positions (mla_merge's block
// holds one partial per thread).
const mlaMaxSplits = 256

// mlaFreqs is one rope's inverse frequencies on the device.
type mlaFreqs struct {
	host []float32
	buf  Buffer
}

// AllocMLA implements backend.MLA (F32 pages [pages, pageSize, Rank+RopeDim]).
func (b *Backend) AllocMLA(pages, pageSize int, s backend.MLAShape) (*backend.MLACache, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	shape := []int{pages, pageSize, s.CacheWidth()}
	n, err := elements("latent cache", shape)
	if err != nil {
		return nil, err
	}
	buf, err := b.alloc(int64(n)*4, "MLA latent cache")
	if err != nil {
		return nil, fmt.Errorf("cuda: latent cache: %w", err)
	}
	if err := b.s.Memset(buf, 0); err != nil {
		b.free(buf)
		return nil, err
	}
	lat := &Tensor{dt: tensor.F32, shape: shape, n: n, buf: buf, name: "MLA latent cache"}
	return &backend.MLACache{Latent: lat, PageSize: pageSize, Width: s.CacheWidth(), TotalPages: pages}, nil
}

// mlaRopeFreqs returns the device copy of the rope's inverse frequencies,
// uploading them the first time these values are seen.
func (b *Backend) mlaRopeFreqs(f []float32) (Buffer, bool) {
	for _, r := range b.mlaRope {
		if slices.Equal(r.host, f) {
			return r.buf, true
		}
	}
	buf, err := b.alloc(int64(len(f))*4, "MLA rope frequencies")
	if !b.check("MLAttention", err) {
		return Buffer{}, false
	}
	if err := Upload(b.d, buf, f); !b.check("MLAttention", err) {
		b.free(buf)
		return Buffer{}, false
	}
	b.mlaRope = append(b.mlaRope, mlaFreqs{host: slices.Clone(f), buf: buf})
	return buf, true
}

// mlaAttnSmem is mla_attn's dynamic shared memory for hg heads per block:
// qs [hg][W] | ks [MLA_TP][W] | acc [hg][R] | ps [hg][MLA_TP] floats.
func mlaAttnSmem(hg, w, r int) int { return (hg*w + mlaTP*w + hg*r + hg*mlaTP) * 4 }

// mlaHeadsPerBlock is the most heads (8, 4, 2 or 1) one mla_attn block
// serves within the device's shared memory, 0 when not even one fits.
func (b *Backend) mlaHeadsPerBlock(w, r int) int {
	limit := max(b.d.Info.MaxSharedOptin, 48<<10)
	for hg := 8; hg >= 1; hg /= 2 {
		if mlaAttnSmem(hg, w, r) <= limit {
			return hg
		}
	}
	return 0
}

// mlaSplits is the number of splits of each row's positions for m rows of
// groups head groups: enough blocks for about eight per multiprocessor. It
// depends on the row count and shape only, never on the contexts, so a
// captured decode step stays valid as they grow.
func (b *Backend) mlaSplits(m, groups int) int {
	want := 8 * max(b.d.Info.SMs, 1)
	return min(max(blocks(want, m*groups), 1), mlaMaxSplits)
}

// mlaChunkRows is the most rows one pass of the attention kernels takes:
// their latent queries and attended latents within mlaScratchBytes (and
// within b.mlaChunkMax when set).
func (b *Backend) mlaChunkRows(p *backend.MLAParams, n int) int {
	per := p.Heads * (p.CacheWidth() + p.Rank) * 4
	c := max(1, min(n, mlaScratchBytes/per))
	if b.mlaChunkMax > 0 {
		c = min(c, b.mlaChunkMax)
	}
	return c
}

// MLAttention implements backend.MLA.
func (b *Backend) MLAttention(out, q, kv, kvNorm, kvB backend.Tensor, c *backend.MLACache, p *backend.MLAParams, n int) {
	if !b.ok() || b.stepMissing("MLAttention") {
		return
	}
	if b.refuse(backend.CheckMLA(p, c, n, len(b.step.Tokens))) {
		return
	}
	wb, nw := b.t(kvB, "MLAttention kv_b_proj"), b.t(kvNorm, "MLAttention kv_a_layernorm")
	if wb == nil || nw == nil {
		return
	}
	if b.refuse(backend.CheckMLAKVB(wb.arg(), p.MLAShape)) || b.refuse(backend.CheckFloatWeight("MLAttention kv_a_layernorm", nw.arg(), p.Rank)) {
		return
	}
	H, R, W, V := p.Heads, p.Rank, c.Width, p.VDim
	qs, ks := b.f32(q, n*p.QWidth(), "MLAttention q"), b.f32(kv, n*W, "MLAttention kv")
	os := b.f32(out, n*H*V, "MLAttention out")
	cache := b.f32(c.Latent, c.TotalPages*c.PageSize*W, "MLAttention cache")
	if qs == nil || ks == nil || os == nil || cache == nil {
		return
	}
	// the kernels index pages without bounds checks: check them here
	if b.refuse(backend.CheckMLAPages(b.step.Seqs, c)) || n <= 0 {
		return
	}
	hg := b.mlaHeadsPerBlock(W, R)
	if hg == 0 {
		b.fail("MLAttention: rank %d + rope %d needs more shared memory than the device's %d bytes", R, p.RopeDim, b.d.Info.MaxSharedOptin)
		return
	}
	invf, ok := b.mlaRopeFreqs(p.Rope.InvFreq)
	if !ok {
		return
	}
	inter := 0
	if p.Rope.Interleave {
		inter = 1
	}
	af := p.Rope.AttnFactor
	ps := c.PageSize
	nwdt, _ := wcode(nw.dt)
	if !b.check("MLAttention", b.d.launch(b.s, "mla_store", grid1(n), grid1(128), 0, cache.buf, ks.buf, nw.buf, nwdt, invf,
		b.reg(rPos), b.reg(rRowSeq), b.reg(rPageOff), b.reg(rPages), ps, R, p.RopeDim, p.Eps, af, inter)) {
		return
	}
	// kv_b_proj as the kernels read it
	wdt, wsc, bn, bk, sc := 0, uint64(0), 1, 1, 1
	if f := wb.fp8; f != nil {
		wdt, wsc, bn, bk, sc = wtMLAFP8, f.scale.Ptr, f.bn, f.bk, f.sc
	} else {
		wdt, _ = wcode(wb.dt)
	}
	chunk := b.mlaChunkRows(p, n)
	groups := blocks(H, hg)
	maxS := b.mlaSplits(chunk, groups)
	if m := n % chunk; m != 0 {
		maxS = max(maxS, b.mlaSplits(m, groups))
	}
	rowsH := int64(chunk) * int64(H)
	if !b.growBuf(&b.mlaQ, rowsH*int64(W)*4, "MLAttention latent queries") || !b.growBuf(&b.mlaO, rowsH*int64(R)*4, "MLAttention attended latents") {
		return
	}
	if maxS > 1 && (!b.growBuf(&b.mlaAcc, rowsH*int64(maxS)*int64(R)*4, "MLAttention split partials") ||
		!b.growBuf(&b.mlaML, rowsH*int64(maxS)*8, "MLAttention split max/sum")) {
		return
	}
	qw, smem := p.QWidth(), mlaAttnSmem(hg, W, R)
	for r0 := 0; r0 < n; r0 += chunk {
		m := min(chunk, n-r0)
		pos, rowseq := b.reg(rPos)+uint64(4*r0), b.reg(rRowSeq)+uint64(4*r0)
		qp := qs.buf.Ptr + uint64(4*r0*qw)
		op := os.buf.Ptr + uint64(4*r0*H*V)
		S := b.mlaSplits(m, groups)
		if !b.check("MLAttention", b.d.launch(b.s, "mla_q_rope", grid2(m, H), grid1(32), 0, b.mlaQ, qp, invf, pos, H, p.Nope, p.RopeDim, R, af, inter)) ||
			!b.check("MLAttention", b.d.launch(b.s, "mla_q_absorb", grid3(blocks(R, 128), H, blocks(m, mlaRB)), grid1(128), mlaRB*p.Nope*4,
				b.mlaQ, qp, wb.buf, wsc, wdt, bn, bk, sc, H, p.Nope, p.RopeDim, V, R, m)) ||
			!b.check("MLAttention", b.d.launch(b.s, "mla_attn", grid3(m, groups, S), grid1(hg*32), smem,
				b.mlaO, b.mlaAcc, b.mlaML, b.mlaQ, cache.buf, pos, rowseq, b.reg(rPageOff), b.reg(rPages), ps, H, R, W, p.Scale, S, hg)) {
			return
		}
		if S > 1 && !b.check("MLAttention", b.d.launch(b.s, "mla_merge", grid2(m, H), grid1(256), 0, b.mlaO, b.mlaAcc, b.mlaML, H, R, S)) {
			return
		}
		if !b.check("MLAttention", b.d.launch(b.s, "mla_v_up", grid3(blocks(V, 8), H, blocks(m, mlaRB)), grid1(256), mlaRB*R*4,
			op, b.mlaO, wb.buf, wsc, wdt, bn, bk, sc, H, p.Nope, V, R, m)) {
			return
		}
	}
}

// RouterGroupTopK implements backend.GroupRouter: a warp per row
// (kernels/router.cu's m_router_group_topk), the row's scores, group
// flags and picks in shared memory.
func (b *Backend) RouterGroupTopK(wts, ids, logits, bias backend.Tensor, g *backend.GroupRoute, n int) {
	if !b.ok() || b.stepMissing("RouterGroupTopK") {
		return
	}
	lt, it, bt := b.t(logits, "RouterGroupTopK logits"), b.t(ids, "RouterGroupTopK ids"), b.t(bias, "RouterGroupTopK bias")
	if lt == nil || it == nil || bt == nil {
		return
	}
	E, k := lt.cols(), g.K
	if b.refuse(backend.CheckGroupRoute(g, E)) || b.refuse(backend.CheckRouterBias(bt.arg(), E)) {
		return
	}
	ls := b.f32(logits, n*E, "RouterGroupTopK logits")
	ws := b.f32(wts, n*k, "RouterGroupTopK weights")
	if ls == nil || ws == nil || b.refuse(backend.CheckRouterIDs(it.arg(), n*k)) || n <= 0 {
		return
	}
	smem := routerGroupSmem(E, g.Groups)
	if limit := max(b.d.Info.MaxSharedOptin, 48<<10); smem > limit {
		b.fail("RouterGroupTopK: %d experts need %d bytes of shared memory, the device has %d", E, smem, limit)
		return
	}
	bdt, _ := wcode(bt.dt)
	nm := 0
	if g.Norm {
		nm = 1
	}
	b.check("RouterGroupTopK", b.d.launch(b.s, "m_router_group_topk", grid1(n), grid1(32), smem,
		ws.buf, it.buf, ls.buf, bt.buf, bdt, n, E, g.Groups, g.TopKGroups, k, nm, g.Scale, b.reg(rLive)))
}

// routerGroupSmem is m_router_group_topk's shared memory for E experts in
// G groups: scores and biased scores [E] floats, group scores [G] floats,
// group flags [G] ints, taken flags [E] bytes.
func routerGroupSmem(E, G int) int { return (2*E+2*G)*4 + E }
