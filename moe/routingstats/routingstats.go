// Package routingstats measures how a MoE model routes a text and how many
// of its routed (token, expert) picks a GPU expert placement would serve:
// per-window pick counts (Recorder, an arch.ExpertRecorder), the skew of a
// layer's picks (LayerSkew), the share of picks that land on the GPU
// experts of a placement mask (Share) and of the dynamic expert update,
// which refills each layer's GPU experts with the previous window's
// hottest (Dynamic).
package routingstats

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/ktserve/kt/moe/placement"
)

// Counts is one text span's routed picks, [layer][expert]: how many
// (token, expert) pairs the router chose. Dense layers' rows stay zero.
type Counts [][]int64

// newCounts returns zero counts for layers layers of experts experts.
func newCounts(layers, experts int) Counts {
	c := make(Counts, layers)
	for l := range c {
		c[l] = make([]int64, experts)
	}
	return c
}

// Add adds o to c (same shape).
func (c Counts) Add(o Counts) {
	for l := range c {
		for e := range c[l] {
			c[l][e] += o[l][e]
		}
	}
}

// Total is the number of picks in c.
func (c Counts) Total() int64 {
	var n int64
	for _, row := range c {
		for _, v := range row {
			n += v
		}
	}
	return n
}

// Recorder collects the router's picks window by window. It implements
// arch.ExpertRecorder (always recording); EndWindow closes a window. It is
// not safe for concurrent use: the model's step calls Add from one
// goroutine, and the caller calls EndWindow between forward passes.
type Recorder struct {
	layers, experts int
	cur             Counts
	windows         []Counts
}

// NewRecorder returns a recorder for a model of layers layers
// (num_hidden_layers) with experts routed experts per MoE layer.
func NewRecorder(layers, experts int) (*Recorder, error) {
	if layers <= 0 || experts <= 0 {
		return nil, fmt.Errorf("routingstats: %d layers of %d experts", layers, experts)
	}
	return &Recorder{layers: layers, experts: experts, cur: newCounts(layers, experts)}, nil
}

// Recording reports true: every pick is counted.
func (r *Recorder) Recording() bool { return true }

// Add counts layer's picks, row-major [tokens, top-k] expert ids; ids out
// of range (masked picks) are skipped.
func (r *Recorder) Add(layer int, ids []int32) {
	if layer < 0 || layer >= r.layers {
		return
	}
	row := r.cur[layer]
	for _, e := range ids {
		if e >= 0 && int(e) < r.experts {
			row[e]++
		}
	}
}

// EndWindow closes the window Add has been counting (one is kept even
// when it holds no pick, so windows stay aligned with the text).
func (r *Recorder) EndWindow() {
	r.windows = append(r.windows, r.cur)
	r.cur = newCounts(r.layers, r.experts)
}

// Windows returns the closed windows' counts, in order.
func (r *Recorder) Windows() []Counts { return r.windows }

// Sum returns the sum of ws, shaped layers x experts.
func Sum(ws []Counts, layers, experts int) Counts {
	s := newCounts(layers, experts)
	for _, w := range ws {
		s.Add(w)
	}
	return s
}

// Skew describes how unevenly one layer's picks spread over its experts.
type Skew struct {
	Picks int64 `json:"picks"`
	// Top10 and Top25 are the shares of the picks taken by the busiest
	// 10 % and 25 % of the experts (TopN of them: round(f × E), at least 1).
	Top10  float64 `json:"top10_share"`
	Top10N int     `json:"top10_experts"`
	Top25  float64 `json:"top25_share"`
	Top25N int     `json:"top25_experts"`
	// Entropy is the pick distribution's entropy over log(E): 1 when
	// every expert is picked equally often.
	Entropy float64 `json:"relative_entropy"`
	// Unused is the number of experts never picked.
	Unused int `json:"unused_experts"`
}

// LayerSkew returns the skew of one layer's pick counts.
func LayerSkew(row []int64) Skew {
	var s Skew
	E := len(row)
	if E == 0 {
		return s
	}
	sorted := slices.Clone(row)
	slices.SortFunc(sorted, func(a, b int64) int { return cmp.Compare(b, a) })
	for _, v := range row {
		s.Picks += v
		if v == 0 {
			s.Unused++
		}
	}
	s.Top10N, s.Top25N = topN(E, 0.10), topN(E, 0.25)
	if s.Picks == 0 {
		return s
	}
	var h float64
	for _, v := range row {
		if v > 0 {
			p := float64(v) / float64(s.Picks)
			h -= p * math.Log(p)
		}
	}
	if E > 1 {
		s.Entropy = h / math.Log(float64(E))
	} else {
		s.Entropy = 1
	}
	s.Top10 = float64(sumInt64(sorted[:s.Top10N])) / float64(s.Picks)
	s.Top25 = float64(sumInt64(sorted[:s.Top25N])) / float64(s.Picks)
	return s
}

// topN is round(f × E), at least 1.
func topN(E int, f float64) int { return max(1, int(math.Round(f*float64(E)))) }

func sumInt64(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

// Share returns how many picks of c fall on experts m puts on the GPU, and
// how many picks c holds. Rows of m beyond c, and counts of layers m does
// not cover, count as CPU picks.
func Share(m placement.Mask, c Counts) (gpu, total int64) {
	for l, row := range c {
		for e, v := range row {
			total += v
			if l < len(m) && e < len(m[l]) && m[l][e] {
				gpu += v
			}
		}
	}
	return gpu, total
}

// Dynamic simulates the dynamic expert update over windows ws: window 0
// runs with the initial placement, and every later window runs with, in
// each layer, the initial placement's number of GPU experts of that layer
// filled with the experts the previous window picked most (ties to the
// lower id, as hybrid.HottestExperts). It returns the picks on GPU experts
// and all picks, summed over the windows.
func Dynamic(initial placement.Mask, ws []Counts) (gpu, total int64) {
	m := initial
	for _, w := range ws {
		g, t := Share(m, w)
		gpu, total = gpu+g, total+t
		next := make(placement.Mask, len(initial))
		for l := range initial {
			next[l] = make([]bool, len(initial[l]))
			if l >= len(w) {
				copy(next[l], initial[l])
				continue
			}
			for _, e := range hottest(w[l], initial.Count(l)) {
				next[l][e] = true
			}
		}
		m = next
	}
	return gpu, total
}

// hottest returns the n experts with the most picks in row, ties to the
// lower id, in increasing id order (the rule of hybrid.HottestExperts);
// n is clamped to [0, len(row)].
func hottest(row []int64, n int) []int {
	n = min(max(n, 0), len(row))
	order := make([]int, len(row))
	for e := range order {
		order[e] = e
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(row[b], row[a]) })
	top := order[:n]
	slices.Sort(top)
	return top
}

// Best returns the mask of the n (MoE layer, expert) cells with the most
// picks in c, ties to the lower layer then expert (the frequency
// strategy's rule), with non-MoE rows all true: the most any placement of
// n GPU experts fixed for the whole text can serve.
func Best(moe []bool, c Counts, n int) placement.Mask {
	E := 0
	if len(c) > 0 {
		E = len(c[0])
	}
	m := make(placement.Mask, len(moe))
	var cells [][2]int
	for l, isMoE := range moe {
		m[l] = make([]bool, E)
		if !isMoE {
			for e := range m[l] {
				m[l][e] = true
			}
			continue
		}
		for e := range E {
			cells = append(cells, [2]int{l, e})
		}
	}
	slices.SortStableFunc(cells, func(a, b [2]int) int { return cmp.Compare(c[b[0]][b[1]], c[a[0]][a[1]]) })
	for _, cell := range cells[:min(max(n, 0), len(cells))] {
		m[cell[0]][cell[1]] = true
	}
	return m
}
