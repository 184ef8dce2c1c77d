//go:build cgo

package cuda

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// The MoE op's grouped path: for prefill-sized steps the per-pair kernels
// read an expert's weights once per (token, expert) pair, ~6 MiB per pair
// at Qwen3.5 width, which bounds a 4096-token layer to ~65 ms on an H100.
// Grouped, the pairs are sorted by expert (moe_align), each expert's rows
// go through cuBLASLt GEMMs reading its weights once, and each token sums
// its pairs (m_moe_combine_rows). The activations enter the GEMMs as two
// bf16 parts (hi + lo, as MatMul's split) so the result keeps ~f32
// precision against the CPU op. The expert counts are read back to the
// host to size the GEMMs, so the path is not taken inside a graph capture.

// moeGroupedMinPairs is the default number of (token, expert) pairs from
// which MoE takes the grouped path (512 tokens at top-8).
const moeGroupedMinPairs = 4096

// moeGroupBM pads each expert's rows to a multiple of it, so the GEMMs'
// row counts (and the cuBLASLt plans cached per shape) come from a short
// list.
const moeGroupBM = 32

// moeGroupMaxExperts is moe_align's limit (one block of 1024 threads).
const moeGroupMaxExperts = 1024

// moeGrouped is the grouped path's state and scratch, sized for the
// largest call so far: cap sorted rows (moeGroupCap) and its pairs.
type moeGrouped struct {
	minPairs int    // pairs from which the path is taken; < 0 never (tests)
	off      bool   // cuBLASLt refused one of its GEMMs: the per-pair kernels from now on
	runs     int    // MoE calls the path served
	sorted   Buffer // int32 [cap]: pair of each sorted row, −1 padding
	blocks   Buffer // int32 [cap/BM]: expert of each BM-row block
	pos      Buffer // int32 [pairs]: sorted row of each pair, −1 skipped
	counts   Buffer // int32 [moeGroupMaxExperts+1]: rows per expert, then blocks
	x        Buffer // bf16 [2][cap][hidden]: hi, lo parts of the inputs
	g, u     Buffer // float32 [cap][inter]
	act      Buffer // bf16 [2][cap][inter]: hi, lo parts of silu(g)·u
	y        Buffer // float32 [cap][hidden]
	host     []int32
}

// moeGroupCap is the sorted rows pairs need over experts experts.
func moeGroupCap(pairs, experts int) int {
	return (pairs + experts*(moeGroupBM-1) + moeGroupBM - 1) / moeGroupBM * moeGroupBM
}

// growMoEGrouped grows whichever of the grouped path's buffers are too
// small for pairs pairs over experts experts of hidden and inter (the
// sorted rows depend on both counts, the pair rows on pairs alone; a
// regrown buffer bumps the graph epoch, as growBuf does).
func (b *Backend) growMoEGrouped(pairs, experts, hidden, inter int) bool {
	g := &b.moeG
	c := int64(moeGroupCap(pairs, experts))
	h, i := int64(hidden), int64(inter)
	return b.growBuf(&g.sorted, c*4, "MoE sorted rows") && b.growBuf(&g.blocks, c/moeGroupBM*4, "MoE row blocks") &&
		b.growBuf(&g.pos, int64(pairs)*4, "MoE pair rows") && b.growBuf(&g.counts, (moeGroupMaxExperts+1)*4, "MoE expert counts") &&
		b.growBuf(&g.x, 2*c*h*bf16Size, "MoE sorted inputs") && b.growBuf(&g.g, c*i*4, "MoE gate outputs") &&
		b.growBuf(&g.u, c*i*4, "MoE up outputs") && b.growBuf(&g.act, 2*c*i*bf16Size, "MoE activations") &&
		b.growBuf(&g.y, c*h*4, "MoE sorted outputs")
}

// SetMoEGroupedMin sets the number of (token, expert) pairs from which the
// MoE op takes its grouped path (0: the default, moeGroupedMinPairs; < 0:
// never), for tests that reach either path at small sizes.
func (b *Backend) SetMoEGroupedMin(pairs int) { b.moeG.minPairs = pairs }

// sized reports whether a step of pairs pairs over experts experts of
// hidden and inter is one the grouped path is for: prefill-sized (at least
// minPairs, or the default), within moe_align's expert limit, rows on
// 16-byte boundaries for cuBLASLt.
func (g *moeGrouped) sized(pairs, experts, hidden, inter int) bool {
	min := g.minPairs
	if min == 0 {
		min = moeGroupedMinPairs
	}
	return min > 0 && pairs >= min && experts <= moeGroupMaxExperts && hidden%8 == 0 && inter%8 == 0
}

// moeGroupedFits reports whether a MoE step of pairs pairs over tab's
// experts takes the grouped path: sized for it, bf16 experts all on this
// GPU, outside a capture (the path reads the counts back), not turned off.
func (b *Backend) moeGroupedFits(tab *moeTable, pairs, hidden, inter int) bool {
	return b.moeG.sized(pairs, tab.e, hidden, inter) && !b.moeG.off && !b.generalOnly && !b.s.Capturing() && !tab.partial &&
		tab.fp8 == nil && tab.gdt == wtBF16 && tab.udt == wtBF16 && tab.ddt == wtBF16
}

// MoEGroupedRuns returns how many MoE calls took the grouped path so far
// (tests and stats).
func (b *Backend) MoEGroupedRuns() int { return b.moeG.runs }

// moeGroupedRun is MoE's grouped path: out [n, hidden] from x [n, hidden],
// the routing weights ws and ids [n, k] over e's experts. false: nothing
// was written to out (cuBLASLt refused a GEMM, the path is then off; or
// an error was recorded), the caller runs the per-pair kernels.
func (b *Backend) moeGroupedRun(out, x, ws Buffer, e *backend.Experts, ids Buffer, n, k, E int) bool {
	h, inter, pairs := e.Hidden, e.Inter, n*k
	g := &b.moeG
	if !b.growMoEGrouped(pairs, E, h, inter) { // each buffer only when too small for this call
		return false
	}
	c := moeGroupCap(pairs, E)
	if !b.check("MoE", b.d.launch(b.s, "moe_align", grid1(1), grid1(1024), 0,
		g.sorted, g.blocks, g.pos, g.counts, ids, Buffer{}, pairs, E, moeGroupBM, c)) {
		return false
	}
	xl := g.x.Slice(int64(c)*int64(h)*bf16Size, int64(c)*int64(h)*bf16Size)
	if !b.check("MoE", b.d.launch(b.s, "m_moe_gather_split", grid1(c), grid1(256), 0,
		g.x, xl, x, g.sorted, g.counts, E, moeGroupBM, h, k)) {
		return false
	}
	if len(g.host) < E+1 {
		g.host = make([]int32, E+1)
	}
	if !b.check("MoE", b.s.Synchronize()) || !b.check("MoE", Download(b.d, g.host[:E+1], g.counts.Slice(0, int64(E+1)*4))) {
		return false
	}
	al := g.act.Slice(int64(c)*int64(inter)*bf16Size, int64(c)*int64(inter)*bf16Size)
	// rows(buf, r0, m, width, size): m sorted rows from r0
	rows := func(buf Buffer, r0, m, width int, size int64) Buffer {
		return buf.Slice(int64(r0)*int64(width)*size, int64(m)*int64(width)*size)
	}
	// gemm: D = hi·Wᵀ + lo·Wᵀ over m rows from r0 (the two parts of A)
	gemm := func(w backend.Tensor, ahi, alo, d Buffer, r0, m, kk, nn int) bool {
		wt := b.t(w, "MoE expert weight")
		if wt == nil {
			return false
		}
		for j, a := range []Buffer{ahi, alo} {
			if err := b.d.Gemm(b.s, GemmArgs{M: m, N: nn, K: kk, A: rows(a, r0, m, kk, bf16Size), B: wt.buf,
				D: rows(d, r0, m, nn, 4), AType: tensor.BF16, BType: tensor.BF16, DType: tensor.F32, Accumulate: j == 1}); err != nil {
				g.off = true
				return false
			}
		}
		return true
	}
	for pass := range 2 { // gate and up, then down
		r0 := 0
		for ex := range E {
			m := (int(g.host[ex]) + moeGroupBM - 1) / moeGroupBM * moeGroupBM
			if m == 0 {
				continue
			}
			ok := true
			if pass == 0 {
				ok = gemm(e.Gate[ex], g.x, xl, g.g, r0, m, h, inter) && gemm(e.Up[ex], g.x, xl, g.u, r0, m, h, inter)
			} else {
				ok = gemm(e.Down[ex], g.act, al, g.y, r0, m, inter, h)
			}
			if !ok {
				return false
			}
			r0 += m
		}
		if pass == 0 && !b.check("MoE", b.d.launch(b.s, "m_moe_act_split", grid1(c), grid1(256), 0,
			g.act, al, g.g, g.u, g.counts, E, moeGroupBM, inter)) {
			return false
		}
	}
	if !b.check("MoE", b.d.launch(b.s, "m_moe_combine_rows", grid2(n, blocks(h, 256)), grid1(256), 0, out, g.y, ws, g.pos, k, h)) {
		return false
	}
	g.runs++
	return true
}

// reserveMoEGrouped is ReserveMoE's share for the grouped path.
func (b *Backend) reserveMoEGrouped(pairs, experts, hidden, inter int) error {
	if !b.moeG.sized(pairs, experts, hidden, inter) {
		return nil
	}
	if !b.growMoEGrouped(pairs, experts, hidden, inter) {
		return fmt.Errorf("MoE grouped scratch for %d pairs: %w", pairs, b.Sync())
	}
	return nil
}
