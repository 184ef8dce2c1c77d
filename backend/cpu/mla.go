package cpu

import (
	"fmt"
	"math"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

var (
	_ backend.MLA         = (*Backend)(nil)
	_ backend.GroupRouter = (*Backend)(nil)
)

// AllocMLA implements backend.MLA (F32 pages).
func (b *Backend) AllocMLA(pages, pageSize int, s backend.MLAShape) (*backend.MLACache, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	lat, err := b.Alloc(tensor.F32, pages, pageSize, s.CacheWidth())
	if err != nil {
		return nil, fmt.Errorf("cpu: latent cache: %w", err)
	}
	return &backend.MLACache{Latent: lat, PageSize: pageSize, Width: s.CacheWidth(), TotalPages: pages}, nil
}

// MLAttention implements backend.MLA: the step's latent rows are normed,
// their rope keys rotated and both stored in the cache; then, in parallel
// over heads, each head's kv_b_proj rows are widened once and every row of
// the step attends in latent space.
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
	W := c.Width
	qs, ks := b.f32(q, n*p.QWidth(), "MLAttention q"), b.f32(kv, n*W, "MLAttention kv")
	os := b.f32(out, n*p.Heads*p.VDim, "MLAttention out")
	cache := b.f32(c.Latent, c.TotalPages*c.PageSize*W, "MLAttention cache")
	if qs == nil || ks == nil || os == nil || cache == nil {
		return
	}
	if b.refuse(backend.CheckMLAPages(b.step.Seqs, c)) {
		return
	}
	// per row: the rope's cos and sin (shared by the key and every head)
	half := p.RopeDim / 2
	if cap(b.mlaCS) < 2*n*half {
		b.mlaCS = make([]float32, 2*n*half)
	}
	cs := b.mlaCS[:2*n*half]
	for t := 0; t < n; t++ {
		ropeAngles(cs[2*t*half:2*(t+1)*half], b.step.Pos[t], &p.Rope)
	}
	// store: [rmsnorm(latent)·w | rope(key)] at each row's position
	ps, R := c.PageSize, p.Rank
	maxPos := 0
	for _, sq := range b.step.Seqs {
		maxPos = max(maxPos, sq.Pos+sq.Len)
		for j := 0; j < sq.Len; j++ {
			r, pos := sq.Start+j, sq.Pos+j
			dst := cache[(int(sq.Pages[pos/ps])*ps+pos%ps)*W:][:W]
			src := ks[r*W : (r+1)*W]
			var ss float32
			for _, v := range src[:R] {
				ss += v * v
			}
			inv := float32(1 / math.Sqrt(float64(ss/float32(R)+p.Eps)))
			for i, v := range src[:R] {
				dst[i] = nw.at(i) * (v * inv)
			}
			ropeApply(dst[R:], src[R:], cs[2*r*half:2*(r+1)*half], p.Rope.Interleave)
		}
	}
	b.mlaJob = mlaJob{b: b, p: p, qs: qs, os: os, cache: cache, cs: cs, wb: wb, ps: ps, n: n, maxPos: maxPos}
	b.pool.runJob(p.Heads, 1, &b.mlaJob)
	b.mlaJob = mlaJob{}
}

// ropeAngles fills cs with the cos (first half) and sin (second half) of
// pos·InvFreq[i], each times the rope's attention factor, in float32 as
// transformers computes them.
func ropeAngles(cs []float32, pos int32, r *backend.MLARope) {
	half := len(r.InvFreq)
	for i, f := range r.InvFreq {
		a := float64(float32(pos) * f)
		cs[i] = float32(math.Cos(a)) * r.AttnFactor
		cs[half+i] = float32(math.Sin(a)) * r.AttnFactor
	}
}

// ropeApply writes src rotated by the angles in cs (ropeAngles) to dst by
// the rotate-half rule, de-interleaving src first when interleave is set.
func ropeApply(dst, src, cs []float32, interleave bool) {
	half := len(src) / 2
	for i := 0; i < half; i++ {
		x1, x2 := src[i], src[i+half]
		if interleave {
			x1, x2 = src[2*i], src[2*i+1]
		}
		c, s := cs[i], cs[half+i]
		dst[i] = x1*c - x2*s
		dst[i+half] = x2*c + x1*s
	}
}

// mlaJob is MLAttention's parallel body over heads.
type mlaJob struct {
	b                 *Backend
	p                 *backend.MLAParams
	qs, os, cache, cs []float32
	wb                *Tensor
	ps, n, maxPos     int
}

func (j *mlaJob) run(worker, lo, hi int) {
	b, p := j.b, j.p
	R, Nope, Rope, V := p.Rank, p.Nope, p.RopeDim, p.VDim
	W, half := R+Rope, Rope/2
	qw := p.Heads * (Nope + Rope)
	buf := b.scratch(worker, (Nope+V)*R+3*R+Rope+j.maxPos)
	wkv, buf := buf[:(Nope+V)*R], buf[(Nope+V)*R:]
	colScales, buf := buf[:R], buf[R:]
	qa, buf := buf[:R], buf[R:]
	ol, buf := buf[:R], buf[R:]
	qr, sc := buf[:Rope], buf[Rope:]
	wk, wv := wkv[:Nope*R], wkv[Nope*R:]
	for h := lo; h < hi; h++ {
		j.wb.rows(h*(Nope+V), Nope+V, R, wkv, colScales, b.simd)
		for t := 0; t < j.n; t++ {
			sq := &b.step.Seqs[b.rowSeq[t]]
			npos := sq.Pos + (t - sq.Start) + 1
			qh := j.qs[t*qw+h*(Nope+Rope):][:Nope+Rope]
			ropeApply(qr, qh[Nope:], j.cs[2*t*half:2*(t+1)*half], p.Rope.Interleave)
			// the query's nope part into latent space: Wkᵀ q_nope
			clear(qa)
			for d, x := range qh[:Nope] {
				row := wk[d*R : (d+1)*R]
				for c, w := range row {
					qa[c] += x * w
				}
			}
			m := float32(math.Inf(-1))
			for pos := 0; pos < npos; pos++ {
				e := j.cache[(int(sq.Pages[pos/j.ps])*j.ps+pos%j.ps)*W:][:W]
				var s, sr float32
				for c, x := range qa {
					s += x * e[c]
				}
				for c, x := range qr {
					sr += x * e[R+c]
				}
				s = (s + sr) * p.Scale
				sc[pos] = s
				m = max(m, s)
			}
			var sum float32
			for pos := 0; pos < npos; pos++ {
				e := float32(math.Exp(float64(sc[pos] - m)))
				sc[pos] = e
				sum += e
			}
			clear(ol)
			for pos := 0; pos < npos; pos++ {
				e := j.cache[(int(sq.Pages[pos/j.ps])*j.ps+pos%j.ps)*W:][:R]
				w := sc[pos] / sum
				for c, x := range e {
					ol[c] += w * x
				}
			}
			o := j.os[(t*p.Heads+h)*V:][:V]
			for d := range o {
				row := wv[d*R : (d+1)*R]
				var s float32
				for c, x := range ol {
					s += x * row[c]
				}
				o[d] = s
			}
		}
	}
}

// rows widens rows [r0, r0+count) (width k) of a float or FP8 weight into
// dst; cs (k floats) is scratch for an FP8 weight's column scales.
func (t *Tensor) rows(r0, count, k int, dst, cs []float32, simd bool) {
	if t.fp8 == nil {
		for i := 0; i < count; i++ {
			t.row(r0+i, k, dst[i*k:(i+1)*k])
		}
		return
	}
	f := t.fp8
	cur := -1
	for i := 0; i < count; i++ {
		r := r0 + i
		if rb := r / f.bn; rb != cur {
			f.colScales(rb, cs)
			cur = rb
		}
		f.decode(r, k, cs, dst[i*k:(i+1)*k], simd)
	}
}

// RouterGroupTopK implements backend.GroupRouter.
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
	if ls == nil || ws == nil || b.refuse(backend.CheckRouterIDs(it.arg(), n*k)) {
		return
	}
	is := it.i32
	if cap(b.routeBuf) < 2*E+g.Groups {
		b.routeBuf = make([]float32, 2*E+g.Groups)
	}
	s, c, gs := b.routeBuf[:E], b.routeBuf[E:2*E], b.routeBuf[2*E:2*E+g.Groups]
	per := E / g.Groups
	live := b.step.LiveRows(n)
	for t := 0; t < n; t++ {
		w, id := ws[t*k:(t+1)*k], is[t*k:(t+1)*k]
		if t >= live { // a padding row routes nowhere
			clear(w)
			for j := range id {
				id[j] = -1
			}
			continue
		}
		for e, x := range ls[t*E : (t+1)*E] {
			s[e] = float32(1 / (1 + math.Exp(-float64(x))))
			c[e] = s[e] + bt.at(e)
		}
		// each group's score: the sum of its two largest biased scores
		for gi := range gs {
			a, bb := float32(math.Inf(-1)), float32(math.Inf(-1))
			for _, v := range c[gi*per : (gi+1)*per] {
				if v > a {
					a, bb = v, a
				} else if v > bb {
					bb = v
				}
			}
			gs[gi] = a + bb
		}
		// keep the TopKGroups best groups (ties: lower group): mark the
		// others by zeroing their experts' biased scores, as transformers'
		// masked_fill(0.0) does
		for gi := range gs {
			better := 0
			for gj, v := range gs {
				if v > gs[gi] || (v == gs[gi] && gj < gi) {
					better++
				}
			}
			if better >= g.TopKGroups {
				clear(c[gi*per : (gi+1)*per])
			}
		}
		// the k largest (ties: lower id)
		var sum float32
		for j := 0; j < k; j++ {
			best := -1
			for e, v := range c {
				if (best < 0 || v > c[best]) && !picked(id[:j], e) {
					best = e
				}
			}
			id[j] = int32(best)
			w[j] = s[best]
			sum += s[best]
		}
		if g.Norm {
			den := sum + 1e-20
			for j := range w {
				w[j] /= den
			}
		}
		for j := range w {
			w[j] *= g.Scale
		}
	}
}

// picked reports whether e is among ids.
func picked(ids []int32, e int) bool {
	for _, p := range ids {
		if int(p) == e {
			return true
		}
	}
	return false
}
