// Package sample picks the next token from a row of logits the way SGLang
// does: repetition, frequency and presence penalties, logit bias, temperature, top-k,
// top-p (nucleus) and min-p filtering, a per-sequence seeded random stream,
// banned tokens, and an optional constraint on which tokens may come next
// (rejection sampling, then filtering). It also computes log-probabilities
// and the most likely tokens. The engine's scheduler uses it, and runners
// that pick beside the logits are held to it (Sampler.Pick).
package sample

import (
	"container/heap"
	"errors"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/ktserve/kt/internal/vecmath"
	"github.com/ktserve/kt/model"
)

// ErrNoToken is returned when a constraint allows no token at all.
var ErrNoToken = errors.New("the output constraint allows no next token")

// Constraint restricts which tokens may be sampled next (for example to keep
// the output valid JSON). Sample calls Allow for candidate tokens and
// Sequence.Accept calls Advance for the token picked.
type Constraint interface {
	// Allow reports whether token may come next.
	Allow(token int32) bool
	// Advance records that token was picked.
	Advance(token int32)
}

// Masker is a Constraint that can give its whole allowed set at once: bit
// t%64 of word t/64 set for each allowed token t (nil: not available, ask
// Allow). Sample then filters the row in one pass.
type Masker interface {
	Mask() []uint64
}

// Params are the sampling settings of one sequence (SGLang's meanings;
// ranges are the caller's to check).
type Params struct {
	Temperature       float64 // below 1e-5: greedy
	TopP              float64 // (0, 1]; 1 disables
	TopK              int     // 0 or -1 disables; 1 is greedy
	MinP              float64 // [0, 1]; 0 disables
	FrequencyPenalty  float64
	PresencePenalty   float64
	RepetitionPenalty float64 // 1 disables
	// LogitBias is added to its tokens' logits after the penalties (nil:
	// none).
	LogitBias  map[int32]float32
	Constraint Constraint
}

// greedy reports whether p picks the first index of the largest logit.
func (p *Params) greedy() bool { return p.Temperature < 1e-5 || p.TopK == 1 }

// Sequence is one sequence's sampling state: its parameters, its random
// stream and the token counts the penalties need.
type Sequence struct {
	p      Params
	rng    *rand.Rand
	counts map[int32]int      // generated tokens (frequency/presence penalties)
	seen   map[int32]struct{} // prompt and generated tokens (repetition penalty)
	// Ban lists tokens that may not come next (the engine's stop tokens
	// before min_new_tokens); nil bans none.
	Ban map[int32]bool
}

// NewSequence starts a sequence after prompt with a random stream seeded
// by seed.
func NewSequence(p Params, prompt []int32, seed uint64) *Sequence {
	s := &Sequence{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if p.FrequencyPenalty != 0 || p.PresencePenalty != 0 {
		s.counts = map[int32]int{}
	}
	if p.RepetitionPenalty != 1 {
		s.seen = make(map[int32]struct{}, len(prompt))
		for _, t := range prompt {
			s.seen[t] = struct{}{}
		}
	}
	return s
}

// Accept records a chosen token (penalty counts, the constraint's state).
func (s *Sequence) Accept(t int32) {
	if s.counts != nil {
		s.counts[t]++
	}
	if s.seen != nil {
		s.seen[t] = struct{}{}
	}
	if s.p.Constraint != nil {
		s.p.Constraint.Advance(t)
	}
}

// Greedy reports whether the sequence's draws take the first index of the
// largest (adjusted) logit and no random value.
func (s *Sequence) Greedy() bool { return s.p.greedy() }

// Plain reports whether the next draw depends on the logits row and one
// uniform value only: no penalty, bias, constraint or ban. A runner may
// then draw in the engine's stead (NextDraw), as SampleAt would.
func (s *Sequence) Plain() bool {
	return s.counts == nil && s.seen == nil && len(s.p.LogitBias) == 0 && s.p.Constraint == nil && len(s.Ban) == 0
}

// Pick is the pick a runner makes for d (model.Chunk.Draw) from a logits
// row, made on the host: the token SampleAt picks for a sequence with d's
// settings and no penalty, constraint or ban, at d.U, and its log-softmax.
// It is the reference the GPU's picks are held to, and what test runners
// that pick use.
func (sm *Sampler) Pick(row []float32, d model.Draw) (int32, float32, error) {
	p := Params{Temperature: d.Temperature, TopK: d.TopK, TopP: d.NucleusP(), MinP: d.MinP, RepetitionPenalty: 1}
	if d.Greedy() {
		p.Temperature = 0
	}
	t, err := sm.SampleAt(&Sequence{p: p}, row, d.U)
	if err != nil {
		return -1, 0, err
	}
	mx, lse := LogSumExp(row)
	return t, Logprob(row, t, mx, lse), nil
}

// NextDraw is the sequence's next draw as a runner makes it
// (model.Chunk.Draw; meaningful when Plain): the zero Draw for a greedy
// pick, else its filters and the next value of its random stream, the one
// Sample would take for that draw. Should the runner hand the row back,
// draw with SampleAt at that value (U) so that the stream stays the one
// Sample alone would have used.
func (s *Sequence) NextDraw() model.Draw {
	p := &s.p
	if p.greedy() {
		return model.Draw{}
	}
	return model.Draw{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP, U: s.rng.Float64()}
}

// Sampler holds scratch buffers; one Sampler serves any number of
// sequences (one at a time) and allocates only when the vocabulary grows.
// The zero value is ready to use.
type Sampler struct {
	work   []float32
	blocks []float64 // work's sums per drawBlock values (drawBlocks)
	pre    []int32   // indices of the tokens a top-p or min-p set may hold
	edge   []int32   // nucleusCut's crossing bucket
	idx    []int32
	h      minHeap
}

// LogSumExp returns the max and log(sum(exp(x - max))) of row.
//
// The exponentials are float32 (internal/vecmath: within 2 ulp), summed in
// float64: lse is within ~3e-7 of the float64 value.
func LogSumExp(row []float32) (mx, lse float64) {
	m := vecmath.Max(row)
	return float64(m), math.Log(vecmath.SumExpShifted(row, m))
}

// LogSoftmax writes log_softmax(row), computed in float64 throughout, into
// dst (grown as needed) and returns it.
func LogSoftmax(row []float32, dst []float64) []float64 {
	dst = slices.Grow(dst[:0], len(row))[:len(row)]
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(s)
	for i, v := range row {
		dst[i] = float64(v) - lse
	}
	return dst
}

// Logprob returns log_softmax(row)[t] given LogSumExp's results.
func Logprob(row []float32, t int32, mx, lse float64) float32 {
	return float32(float64(row[t]) - mx - lse)
}

// Largest returns the indices of the n largest values of x, best first
// (ties: lower index first). The slice is scratch, valid until the next call.
func (sm *Sampler) Largest(x []float32, n int) []int32 { return sm.largestAmong(x, nil, n) }

// topK is Largest(w, k) for probabilities relative to the max (w's
// maximum is 1): where at least k of them reach a threshold, the k largest
// are among those, so one vector pass (vecmath.Above) leaves the heap a
// few candidates instead of the vocabulary. Ties at the k-th value are all
// at or above the threshold too, so the pick is Largest's.
func (sm *Sampler) topK(w []float32, k int) []int32 {
	for _, thr := range []float32{0.5, 0.05, 1e-3, 1e-6, 1e-12} { // the first with k: few, on peaked and flat rows alike
		if sm.pre = vecmath.Above(w, thr, sm.pre); len(sm.pre) >= k {
			return sm.largestAmong(w, sm.pre, k)
		}
	}
	return sm.Largest(w, k)
}

// largestAmong is Largest over the indices in among, in order (nil: all
// of x).
func (sm *Sampler) largestAmong(x []float32, among []int32, n int) []int32 {
	n = min(n, len(x))
	sm.h = sm.h[:0]
	push := func(i int32, v float32) {
		if len(sm.h) < n {
			heap.Push(&sm.h, item{i, v})
		} else if v > sm.h[0].v {
			sm.h[0] = item{i, v}
			heap.Fix(&sm.h, 0)
		}
	}
	if among == nil {
		for i, v := range x {
			push(int32(i), v)
		}
	} else {
		for _, i := range among {
			push(i, x[i])
		}
	}
	sm.idx = sm.idx[:0]
	for _, it := range sm.h {
		sm.idx = append(sm.idx, it.i)
	}
	slices.SortFunc(sm.idx, func(a, b int32) int {
		if x[a] != x[b] {
			if x[a] > x[b] {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	return sm.idx
}

type item struct {
	i int32
	v float32
}

// minHeap keeps the largest values seen, smallest on top.
type minHeap []item

func (h minHeap) Len() int { return len(h) }
func (h minHeap) Less(a, b int) bool {
	if h[a].v != h[b].v {
		return h[a].v < h[b].v
	}
	return h[a].i > h[b].i
}
func (h minHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *minHeap) Push(x any)   { *h = append(*h, x.(item)) }
func (h *minHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// constraintTries bounds rejection sampling under a constraint before the
// whole vocabulary is filtered.
const constraintTries = 32

// Sample picks s's next token from a logits row (the row is not
// modified). The caller records the pick with s.Accept.
//
// A sampled pick is the first token, in vocabulary order over the
// candidate set (top-k, top-p and min-p applied to the tempered
// probabilities), at which the running mass exceeds u times the set's
// mass, u the next value of s's stream. Greedy picks take no value.
func (sm *Sampler) Sample(s *Sequence, row []float32) (int32, error) {
	return sm.sample(s, row, -1)
}

// SampleAt is Sample with u, a value NextDraw took, as the first
// draw's uniform value (a constraint's rejected draws take further values
// from s's stream, as Sample's do).
func (sm *Sampler) SampleAt(s *Sequence, row []float32, u float64) (int32, error) {
	return sm.sample(s, row, u)
}

// sample is Sample with the first draw's uniform value given (u >= 0) or
// taken from s's stream (u < 0).
func (sm *Sampler) sample(s *Sequence, row []float32, u float64) (int32, error) {
	if s.p.greedy() && s.Plain() {
		// nothing adjusts the row: pick from it as it is, uncopied
		return greedyPick(row)
	}
	w := sm.adjusted(s, row)
	c := applyConstraintMask(w, s.p.Constraint)
	if s.p.greedy() {
		return greedyAllowed(w, c)
	}
	total, blocks, err := sm.probabilities(w, s.p.Temperature)
	if err != nil {
		return 0, err
	}
	cs := sm.candidates(w, &s.p, c != nil, total)
	return sm.drawAllowed(s, row, w, c, cs, blocks, total, u)
}

// adjusted copies row into the sampler's scratch and applies s's
// penalties, logit bias and bans to the copy.
func (sm *Sampler) adjusted(s *Sequence, row []float32) []float32 {
	p := &s.p
	if cap(sm.work) < len(row) {
		sm.work = make([]float32, len(row))
	}
	w := sm.work[:len(row)]
	copy(w, row)
	if s.seen != nil {
		rp := float32(p.RepetitionPenalty)
		for t := range s.seen {
			if int(t) < len(w) {
				if w[t] > 0 {
					w[t] /= rp
				} else {
					w[t] *= rp
				}
			}
		}
	}
	if s.counts != nil {
		for t, c := range s.counts {
			if int(t) < len(w) {
				w[t] -= float32(p.FrequencyPenalty*float64(c) + p.PresencePenalty)
			}
		}
	}
	for t, b := range p.LogitBias {
		if t >= 0 && int(t) < len(w) {
			w[t] += b
		}
	}
	negInf := float32(math.Inf(-1))
	for t := range s.Ban {
		if int(t) < len(w) {
			w[t] = negInf
		}
	}
	return w
}

// applyConstraintMask filters w by c's mask when c gives one (Masker) and
// returns the constraint still to consult: nil when the mask said it all.
func applyConstraintMask(w []float32, c Constraint) Constraint {
	if m, ok := c.(Masker); ok {
		if bits := m.Mask(); bits != nil {
			applyMask(w, bits)
			return nil // every token left is allowed
		}
	}
	return c
}

// greedyAllowed is the first index of w's largest value that c (nil: no
// constraint) allows.
func greedyAllowed(w []float32, c Constraint) (int32, error) {
	negInf := float32(math.Inf(-1))
	for try := 0; ; try++ {
		best := argmax(w)
		if best < 0 {
			return 0, ErrNoToken
		}
		if c == nil || c.Allow(best) {
			return best, nil
		}
		w[best] = negInf
		if try == constraintTries {
			maskDisallowed(w, c)
		}
	}
}

// probabilities applies the temperature to w and turns it into
// probabilities relative to its maximum (w's maximum becomes 1), with
// their sums per block of drawBlock (for drawing from the whole
// vocabulary) and their total.
func (sm *Sampler) probabilities(w []float32, temperature float64) (total float64, blocks []float64, err error) {
	var mx float32
	if inv := float32(1 / temperature); inv == 1 {
		mx = vecmath.Max(w)
	} else {
		mx = vecmath.ScaleMax(w, inv)
	}
	if math.IsInf(float64(mx), -1) {
		return 0, nil, ErrNoToken
	}
	nb := vecmath.Blocks(len(w), drawBlock)
	if cap(sm.blocks) < nb {
		sm.blocks = make([]float64, nb)
	}
	blocks = sm.blocks[:nb]
	total = vecmath.ExpShiftedBlocks(w, mx, drawBlock, blocks)
	return total, blocks, nil
}

// candidateSet is the set a sampled draw picks from: cand in vocabulary
// order, or nuc's implicit top-p set (among sm.pre), or, both nil, the
// whole vocabulary.
type candidateSet struct {
	cand []int32
	nuc  *nucleusSet
}

// candidates applies p's top-k, top-p and min-p filters to the
// probabilities w (maximum 1, summing to total). constrained says a
// constraint will refuse some draws, which needs the set listed.
func (sm *Sampler) candidates(w []float32, p *Params, constrained bool, total float64) candidateSet {
	var cand []int32
	var nuc *nucleusSet
	byRank := false // cand is best first, not in vocabulary order
	if p.TopK > 0 && p.TopK < len(w) {
		cand = slices.Clone(sm.topK(w, p.TopK)) // best first
		byRank = true
	}
	if p.TopP < 1 {
		if cand != nil {
			var total float64
			for _, i := range cand {
				total += float64(w[i])
			}
			cand = nucleus(cand, w, p.TopP, total)
		} else {
			// tokens under (1-topP)·total/V together hold less than
			// 1-topP of the mass, so the nucleus is among the others
			thr := float64(1-p.TopP) * total / float64(len(w))
			t0 := float32(thr)
			if float64(t0) > thr {
				t0 = math.Nextafter32(t0, 0)
			}
			sm.pre = vecmath.Above(w, t0, sm.pre)
			ns := sm.nucleusCut(w, sm.pre, p.TopP, total)
			if p.MinP > 0 || constrained {
				cand = ns.members(w, sm.pre, nil)
			} else {
				nuc = &ns // drawn from as it is: no list of most of the vocabulary
			}
		}
	}
	if p.MinP > 0 {
		th := float32(p.MinP)
		if cand != nil {
			pmax := float32(0)
			for _, i := range cand {
				pmax = max(pmax, w[i])
			}
			th *= pmax
			cand = slices.DeleteFunc(cand, func(i int32) bool { return w[i] < th })
		} else {
			sm.pre = vecmath.Above(w, th, sm.pre)
			cand = sm.pre
		}
	}
	if byRank {
		slices.Sort(cand) // every draw scans its set in vocabulary order
	}
	return candidateSet{cand: cand, nuc: nuc}
}

// drawAllowed draws from cs at u (u < 0, and every draw after a refused
// one: the next value of s's stream) until c (nil: no constraint) allows
// the token; after constraintTries refusals the set is filtered by c, and
// where c allows none of it, the best allowed token of row wins.
func (sm *Sampler) drawAllowed(s *Sequence, row, w []float32, c Constraint, cs candidateSet, blocks []float64, total, u float64) (int32, error) {
	cand := cs.cand
	for try := 0; ; try++ {
		r := u
		if try > 0 || r < 0 {
			r = s.rng.Float64()
		}
		var t int32
		switch {
		case cs.nuc != nil: // no constraint: one draw
			t = cs.nuc.draw(r, w, sm.pre)
		case cand == nil && try == 0:
			t = drawBlocks(r, w, blocks, total)
		default:
			t = draw(r, w, cand) // a refused token was zeroed: the block sums are stale
		}
		if t < 0 {
			if c == nil {
				return 0, ErrNoToken
			}
			// Every candidate was refused before the filtering below.
			return bestAllowed(w, row, c)
		}
		if c == nil || c.Allow(t) {
			return t, nil
		}
		w[t] = 0
		if try != constraintTries {
			continue
		}
		if cand == nil {
			for i := range w {
				if w[i] > 0 && !c.Allow(int32(i)) {
					w[i] = 0
				}
			}
			continue
		}
		cand = slices.DeleteFunc(cand, func(i int32) bool { return !c.Allow(i) })
		if len(cand) == 0 {
			// Nothing allowed in the filtered set.
			return bestAllowed(w, row, c)
		}
	}
}

// bestAllowed is the best token of the whole vocabulary (row) that c
// allows, found in w as scratch.
func bestAllowed(w, row []float32, c Constraint) (int32, error) {
	copy(w, row)
	maskDisallowed(w, c)
	if b := argmax(w); b >= 0 {
		return b, nil
	}
	return 0, ErrNoToken
}

// greedyPick is the greedy pick from a row nothing adjusts: the first
// index of its largest value, NaNs skipped (ErrNoToken when every value is
// -Inf or NaN), as argmax finds in a copy, from one vectorised pass for the
// maximum and a scan that stops at its first occurrence.
func greedyPick(row []float32) (int32, error) {
	if len(row) == 0 {
		return 0, ErrNoToken
	}
	m := vecmath.Max(row)
	if math.IsInf(float64(m), -1) {
		return 0, ErrNoToken
	}
	for i, v := range row {
		if v == m {
			return int32(i), nil
		}
	}
	return 0, ErrNoToken // every value NaN
}

// nucleus keeps the shortest prefix of cand (sorted best first) whose
// probability mass reaches topP of total.
func nucleus(cand []int32, w []float32, topP, total float64) []int32 {
	var sum float64
	for n, i := range cand {
		sum += float64(w[i])
		if sum >= topP*total {
			return cand[:n+1]
		}
	}
	return cand
}

// nucleusSet is a top-p set of a probability row kept implicit: every
// token whose value exceeds v, and those equal to v with an index up to
// last (the order a full sort takes them in: best first, ties to the lower
// id). mass is the set's total.
type nucleusSet struct {
	v    float32
	last int32
	mass float64
}

// in reports whether token i of value x is in the set.
func (ns nucleusSet) in(i int32, x float32) bool { return x > ns.v || x == ns.v && i <= ns.last }

// members appends the set's tokens among pre (in order) to out.
func (ns nucleusSet) members(w []float32, pre, out []int32) []int32 {
	for _, i := range pre {
		if ns.in(i, w[i]) {
			out = append(out, i)
		}
	}
	return out
}

// draw samples a token of the set, proportionally to w, at the uniform
// value u, scanning pre (which holds the set) in order; -1 if the set has
// no mass.
func (ns nucleusSet) draw(u float64, w []float32, pre []int32) int32 {
	if !(ns.mass > 0) {
		return -1
	}
	r := u * ns.mass
	last := int32(-1)
	for _, i := range pre {
		if x := w[i]; x > 0 && ns.in(i, x) {
			last = i
			if r -= float64(x); r < 0 {
				return i
			}
		}
	}
	return last // rounding: the last token of the set, as draw
}

// nucleusCut finds the smallest set of top tokens of w (all positive,
// maximum 1) whose mass reaches topP of total, w's sum, among pre, the
// indices (in order) of every token that can be in it. It buckets the
// probabilities by the top 11 bits of their float32 bits (monotone for
// positive floats: exponent and 2 mantissa bits) and finds the bucket where
// the cumulative mass, from the top, crosses the target; every token of a
// higher bucket is in the set. The crossing bucket is bucketed again by the
// next 11 bits, and only that level's crossing bucket is sorted (best
// first, ties to the lower id) to find the last token the set takes. The
// set is the one a full sort would give, found without listing it: on a
// flat distribution it is most of the vocabulary.
func (sm *Sampler) nucleusCut(w []float32, pre []int32, topP, total float64) nucleusSet {
	target := topP * total
	var sums [1 << nucleusBits]float64
	for _, i := range pre {
		v := w[i]
		sums[math.Float32bits(v)>>(32-nucleusBits)] += float64(v)
	}
	cut, above := crossing(sums[:], target, 0)
	sm.edge = sm.edge[:0]
	for _, i := range pre {
		if math.Float32bits(w[i])>>(32-nucleusBits) == cut {
			sm.edge = append(sm.edge, i)
		}
	}
	const low = 1<<nucleusBits - 1
	clear(sums[:])
	for _, i := range sm.edge {
		v := w[i]
		sums[math.Float32bits(v)>>(32-2*nucleusBits)&low] += float64(v)
	}
	cut2, above := crossing(sums[:], target, above)
	edge := sm.edge[:0]
	for _, i := range sm.edge {
		if math.Float32bits(w[i])>>(32-2*nucleusBits)&low == cut2 {
			edge = append(edge, i)
		}
	}
	slices.SortFunc(edge, bestFirst(w))
	sum := above
	for _, i := range edge {
		sum += float64(w[i])
		if sum >= target {
			return nucleusSet{v: w[i], last: i, mass: sum}
		}
	}
	// rounding kept the target out of reach: all of pre
	sum = 0
	for _, i := range pre {
		sum += float64(w[i])
	}
	return nucleusSet{v: 0, last: math.MaxInt32, mass: sum}
}

// nucleusBits is the bits of a probability's float32 representation each
// level of nucleusCut's buckets takes: 2048 float64 sums, 16 KiB, in L1.
const nucleusBits = 11

// crossing walks sums from the highest bucket down, adding each to above,
// and returns the first bucket at which above plus its sum reaches target,
// with the mass above it (bucket 0 and the mass above it where none does).
func crossing(sums []float64, target, above float64) (uint32, float64) {
	for b := len(sums) - 1; b > 0; b-- {
		if above+sums[b] >= target {
			return uint32(b), above
		}
		above += sums[b]
	}
	return 0, above
}

// bestFirst orders token ids by w, largest first, ties to the lower id.
func bestFirst(w []float32) func(a, b int32) int {
	return func(a, b int32) int {
		switch {
		case w[a] > w[b]:
			return -1
		case w[a] < w[b]:
			return 1
		}
		return int(a - b)
	}
}

// drawBlock is the block of the sampler's block sums: 594 blocks of a
// 152k vocabulary, so that a draw scans a few hundred sums and one block
// instead of the whole row.
const drawBlock = 256

// drawBlocks is draw over every index, given w's sums per block of
// drawBlock and their total (vecmath.ExpShiftedBlocks): it finds the block
// the point u·total falls in, then the index within it (going on past it
// where rounding leaves the point beyond the block's values). -1 if the
// mass is zero.
func drawBlocks(u float64, w []float32, blocks []float64, total float64) int32 {
	if !(total > 0) {
		return -1
	}
	r := u * total
	for b, s := range blocks {
		if r >= s {
			r -= s
			continue
		}
		for i := b * drawBlock; i < len(w); i++ {
			if v := w[i]; v > 0 {
				if r -= float64(v); r < 0 {
					return int32(i)
				}
			}
		}
		break
	}
	for i := len(w) - 1; i >= 0; i-- { // rounding: the last index with mass, as draw
		if w[i] > 0 {
			return int32(i)
		}
	}
	return -1
}

// draw samples an index proportionally to w over cand (nil: every index;
// else in vocabulary order) at the uniform value u: the first index at
// which the running mass exceeds u times the total. -1 if the mass is zero.
func draw(u float64, w []float32, cand []int32) int32 {
	var total float64
	if cand == nil {
		for _, v := range w {
			total += float64(v)
		}
	} else {
		for _, i := range cand {
			total += float64(w[i])
		}
	}
	if !(total > 0) {
		return -1
	}
	r := u * total
	last := int32(-1)
	if cand == nil {
		for i, v := range w {
			if v > 0 {
				last = int32(i)
				r -= float64(v)
				if r < 0 {
					return int32(i)
				}
			}
		}
		return last
	}
	for _, i := range cand {
		if w[i] > 0 {
			last = i
			r -= float64(w[i])
			if r < 0 {
				return i
			}
		}
	}
	return last
}

func argmax(w []float32) int32 {
	best := int32(-1)
	bv := float32(math.Inf(-1))
	for i, v := range w {
		if v > bv {
			bv, best = v, int32(i)
		}
	}
	return best
}

// applyMask sets w[i] to -Inf where bit i of bits is clear (tokens past
// the bitset are cleared too).
func applyMask(w []float32, bits []uint64) {
	negInf := float32(math.Inf(-1))
	for k := 0; k*64 < len(w); k++ {
		var word uint64
		if k < len(bits) {
			word = bits[k]
		}
		if word == ^uint64(0) {
			continue
		}
		seg := w[k*64 : min(len(w), k*64+64)]
		if word == 0 {
			for i := range seg {
				seg[i] = negInf
			}
			continue
		}
		for i := range seg {
			if word>>i&1 == 0 {
				seg[i] = negInf
			}
		}
	}
}

func maskDisallowed(w []float32, c Constraint) {
	negInf := float32(math.Inf(-1))
	for i := range w {
		if w[i] != negInf && !c.Allow(int32(i)) {
			w[i] = negInf
		}
	}
}
