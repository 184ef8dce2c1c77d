package cpu

import "github.com/ktserve/kt/backend"

// moeScratch holds the buffers of the grouped expert FFN, grown on demand
// (sized by the largest step seen, so steady state allocates nothing).
type moeScratch struct {
	count, start []int
	order        []int32 // (token*k + j) entries grouped by expert
	xs, g, u, y  []float32
	mid          []float32 // expert LoRA: A x of one row
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// elsewhere reports whether expert ex has no weights here (all three nil:
// served elsewhere), which MoE skips as it skips ids < 0.
func elsewhere(e *backend.Experts, ex int) bool {
	return e.Gate[ex] == nil && e.Up[ex] == nil && e.Down[ex] == nil
}

// MoE implements backend.Ops: tokens are grouped by expert so each
// expert's three matmuls run once over all its tokens; experts without
// weights (elsewhere) are skipped.
func (b *Backend) MoE(out, x backend.Tensor, e *backend.Experts, wts, ids backend.Tensor, n int) {
	if !b.ok() {
		return
	}
	it := b.t(ids, "MoE ids")
	if it == nil {
		return
	}
	if b.refuse(backend.CheckExperts(e)) {
		return
	}
	ne, h, inter := len(e.Gate), e.Hidden, e.Inter
	if e.LoRA != nil && b.refuse(e.LoRA.Check(ne, h, inter)) {
		return
	}
	k := it.cols()
	if b.refuse(backend.CheckExpertIDs(it.arg(), n, k)) {
		return
	}
	xs, os := b.f32(x, n*h, "MoE x"), b.f32(out, n*h, "MoE out")
	ws := b.f32(wts, n*k, "MoE weights")
	if xs == nil || os == nil || ws == nil {
		return
	}
	is := it.i32[:n*k]
	s := &b.moe
	if cap(s.count) < ne {
		s.count, s.start = make([]int, ne), make([]int, ne+1)
	}
	s.count, s.start = s.count[:ne], s.start[:ne+1]
	clear(s.count)
	for _, id := range is {
		if id >= int32(ne) {
			b.fail("MoE: expert id %d outside [0,%d)", id, ne)
			return
		}
		if id >= 0 && !elsewhere(e, int(id)) {
			s.count[id]++
		}
	}
	s.start[0] = 0
	for i, c := range s.count {
		s.start[i+1] = s.start[i] + c
	}
	tot := s.start[ne]
	if cap(s.order) < tot {
		s.order = make([]int32, tot)
	}
	s.order = s.order[:tot]
	clear(s.count) // reuse as fill cursor
	for idx, id := range is {
		if id >= 0 && !elsewhere(e, int(id)) {
			s.order[s.start[id]+s.count[id]] = int32(idx)
			s.count[id]++
		}
	}
	s.xs, s.g, s.u, s.y = grow(s.xs, tot*h), grow(s.g, tot*inter), grow(s.u, tot*inter), grow(s.y, tot*h)
	for i, idx := range s.order {
		t := int(idx) / k
		copy(s.xs[i*h:(i+1)*h], xs[t*h:(t+1)*h])
	}
	for ex := 0; ex < ne; ex++ {
		lo, hi := s.start[ex], s.start[ex+1]
		if lo == hi {
			continue
		}
		start := lo
		g, u, d := b.t(e.Gate[ex], "MoE gate"), b.t(e.Up[ex], "MoE up"), b.t(e.Down[ex], "MoE down")
		if g == nil || u == nil || d == nil {
			return
		}
		for _, w := range [3]*Tensor{g, u, d} {
			if b.refuse(backend.CheckExpertWeight(ex, w.arg(), h, inter)) {
				return
			}
		}
		m := hi - lo
		xg := s.xs[lo*h : hi*h]
		gs, us := s.g[lo*inter:hi*inter], s.u[lo*inter:hi*inter]
		b.matmul(gs, inter, xg, h, m, g, h, inter)
		b.matmul(us, inter, xg, h, m, u, h, inter)
		if lo := e.LoRA; lo != nil {
			s.mid = grow(s.mid, lo.Rank)
			for i := 0; i < m; i++ {
				x := xg[i*h : (i+1)*h]
				backend.LoRADelta(gs[i*inter:(i+1)*inter], x, lo.GateA[ex*lo.Rank*h:], lo.GateB[ex*inter*lo.Rank:], s.mid, lo.Scale)
				backend.LoRADelta(us[i*inter:(i+1)*inter], x, lo.UpA[ex*lo.Rank*h:], lo.UpB[ex*inter*lo.Rank:], s.mid, lo.Scale)
			}
		}
		siluMul(gs, gs, us)
		b.matmul(s.y[lo*h:hi*h], h, gs, inter, m, d, inter, h)
		if lo := e.LoRA; lo != nil {
			for i := 0; i < m; i++ {
				backend.LoRADelta(s.y[(start+i)*h:(start+i+1)*h], gs[i*inter:(i+1)*inter], lo.DownA[ex*lo.Rank*inter:], lo.DownB[ex*h*lo.Rank:], s.mid, lo.Scale)
			}
		}
	}
	clear(os)
	// accumulate in token order, experts in (token, j) order
	for i, idx := range s.order {
		t := int(idx) / k
		w := ws[idx]
		o, y := os[t*h:(t+1)*h], s.y[i*h:(i+1)*h]
		for c, v := range y {
			o[c] += w * v
		}
	}
}
