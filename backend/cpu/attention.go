package cpu

import (
	"math"

	"github.com/ktserve/kt/backend"
)

// Attention implements backend.Ops: store the step's keys and values in
// the paged cache, then causal grouped-query attention per token and head.
func (b *Backend) Attention(out, q, k, v backend.Tensor, kv *backend.KVCache, p *backend.Attn, n int) {
	if !b.ok() || b.stepMissing("Attention") {
		return
	}
	if b.refuse(backend.CheckAttention(p, kv, n, len(b.step.Tokens))) {
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
	if b.refuse(backend.CheckKVPages(b.step.Seqs, kv)) {
		return
	}
	ps := kv.PageSize
	// store
	for _, sq := range b.step.Seqs {
		for j := 0; j < sq.Len; j++ {
			pos := sq.Pos + j
			pg := int(sq.Pages[pos/ps])
			dst := (pg*ps + pos%ps) * kw
			r := sq.Start + j
			copy(kc[dst:dst+kw], ks[r*kw:(r+1)*kw])
			copy(vc[dst:dst+kw], vs[r*kw:(r+1)*kw])
		}
	}
	b.attJob = attnJob{b: b, p: p, qs: qs, os: os, kc: kc, vc: vc, ps: ps}
	b.pool.runJob(n*p.Heads, 1, &b.attJob)
	b.attJob = attnJob{}
}

// attnJob is Attention's parallel body over (token, head) pairs.
type attnJob struct {
	b              *Backend
	p              *backend.Attn
	qs, os, kc, vc []float32
	ps             int
}

func (j *attnJob) run(worker, lo, hi int) {
	b, p := j.b, j.p
	heads, hd := p.Heads, p.HeadDim
	qw := heads * hd
	for idx := lo; idx < hi; idx++ {
		t, h := idx/heads, idx%heads
		sq := &b.step.Seqs[b.rowSeq[t]]
		npos := sq.Pos + (t - sq.Start) + 1
		sc := b.scratch(worker, npos)
		if b.simd {
			attnSIMD(j.qs[t*qw:], j.kc, j.vc, sq.Pages, j.ps, p.KVHeads, hd, heads, npos, p.Scale, sc, j.os[t*qw:], h, h+1)
			continue
		}
		attnHead(j.qs[t*qw+h*hd:t*qw+(h+1)*hd], j.kc, j.vc, sq.Pages, j.ps, p.KVHeads, h/(heads/p.KVHeads), hd, npos, p.Scale, sc, j.os[t*qw+h*hd:t*qw+(h+1)*hd])
	}
}

// attnHead is the portable attention of one query head over npos cached
// positions of kv head kvh.
func attnHead(q, kc, vc []float32, pages []int32, ps, kvHeads, kvh, hd, npos int, scale float32, sc, out []float32) {
	m := float32(math.Inf(-1))
	for p := 0; p < npos; p++ {
		base := ((int(pages[p/ps])*ps+p%ps)*kvHeads + kvh) * hd
		var s float32
		for d, x := range q {
			s += x * kc[base+d]
		}
		s *= scale
		sc[p] = s
		m = max(m, s)
	}
	var sum float32
	for p := 0; p < npos; p++ {
		e := float32(math.Exp(float64(sc[p] - m)))
		sc[p] = e
		sum += e
	}
	clear(out)
	for p := 0; p < npos; p++ {
		base := ((int(pages[p/ps])*ps+p%ps)*kvHeads + kvh) * hd
		w := sc[p] / sum
		for d := range out {
			out[d] += w * vc[base+d]
		}
	}
}
