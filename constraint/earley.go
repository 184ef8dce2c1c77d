package constraint

import (
	"errors"
	"fmt"
	"math"
)

// A context-free grammar over bytes for EBNF grammars that are not
// regular, recognized by an Earley parser one byte at a time. Terminals
// are byte ranges (a character class becomes one production per UTF-8
// byte-range sequence); repetitions become left-recursive helper rules;
// nullable rules are handled as Aycock and Horspool do (a prediction of a
// nullable rule also moves past it). Every rule kept derives some string,
// so every parser state with items is a prefix of a full match.

// endSym marks the end of a production in cfg.syms.
const endSym = math.MinInt32

// Limits of the Earley recognizer.
const (
	// maxCFGSymbols bounds a compiled grammar's productions.
	maxCFGSymbols = 1 << 20
	// maxColumnItems bounds the items of one parser column; past it the
	// byte is refused.
	maxColumnItems = 1 << 16
)

// cfg is a compiled context-free grammar.
type cfg struct {
	syms     []int32     // productions, each ended by endSym; >= 0 rule, < 0 terminal -(t+1)
	lhs      []int32     // per position: the rule of its production
	prods    [][]int32   // per rule: the start positions of its productions
	terms    []byteRange // terminals
	nullable []bool
	accept   int32 // position of the end of the start production
}

type cfgBuilder struct {
	c     *cfg
	rules map[string]int32
	g     *EBNF
	err   error
}

func (b *cfgBuilder) newRule() int32 {
	b.c.prods = append(b.c.prods, nil)
	return int32(len(b.c.prods) - 1)
}

func (b *cfgBuilder) addProd(rule int32, syms []int32) {
	if len(b.c.syms)+len(syms) > maxCFGSymbols {
		if b.err == nil {
			b.err = fmt.Errorf("ebnf: the grammar expands to over %d symbols: %w", maxCFGSymbols, ErrTooLarge)
		}
		return
	}
	b.c.prods[rule] = append(b.c.prods[rule], int32(len(b.c.syms)))
	for _, s := range syms {
		b.c.syms = append(b.c.syms, s)
		b.c.lhs = append(b.c.lhs, rule)
	}
	b.c.syms = append(b.c.syms, endSym)
	b.c.lhs = append(b.c.lhs, rule)
}

func (b *cfgBuilder) term(lo, hi byte) int32 {
	for i, t := range b.c.terms {
		if t.lo == lo && t.hi == hi {
			return int32(-(i + 1))
		}
	}
	b.c.terms = append(b.c.terms, byteRange{lo, hi})
	return int32(-len(b.c.terms))
}

// ref is the rule of the named EBNF rule, built on first use.
func (b *cfgBuilder) ref(name string) int32 {
	if r, ok := b.rules[name]; ok {
		return r
	}
	r := b.newRule()
	b.rules[name] = r
	b.alts(r, b.g.rules[name])
	return r
}

// alts adds e's alternatives as productions of rule r.
func (b *cfgBuilder) alts(r int32, e *expr) {
	if e.kind == eAlt {
		for _, s := range e.subs {
			b.addProd(r, b.seq(s, nil))
		}
		return
	}
	b.addProd(r, b.seq(e, nil))
}

// seq appends the symbols of e (in a sequence) to out.
func (b *cfgBuilder) seq(e *expr, out []int32) []int32 {
	if b.err != nil {
		return out
	}
	switch e.kind {
	case eLit:
		for i := 0; i < len(e.lit); i++ {
			out = append(out, b.term(e.lit[i], e.lit[i]))
		}
	case eClass:
		r := b.newRule()
		for i := 0; i+1 < len(e.ranges); i += 2 {
			utf8Sequences(e.ranges[i], e.ranges[i+1], func(s []byteRange) {
				syms := make([]int32, len(s))
				for k, br := range s {
					syms[k] = b.term(br.lo, br.hi)
				}
				b.addProd(r, syms)
			})
		}
		out = append(out, r)
	case eRef:
		out = append(out, b.ref(e.name))
	case eSeq:
		for _, s := range e.subs {
			out = b.seq(s, out)
		}
	case eAlt:
		r := b.newRule()
		b.alts(r, e)
		out = append(out, r)
	case eRepeat:
		// x{min} then (x*) or nested optional copies.
		item := b.newRule()
		b.alts(item, e.subs[0])
		for range e.min {
			out = append(out, item)
		}
		switch {
		case e.max < 0:
			star := b.newRule()
			b.addProd(star, nil)
			b.addProd(star, []int32{star, item})
			out = append(out, star)
		case e.max > e.min:
			tail := int32(-1)
			for range e.max - e.min {
				o := b.newRule()
				b.addProd(o, nil)
				if tail < 0 {
					b.addProd(o, []int32{item})
				} else {
					b.addProd(o, []int32{item, tail})
				}
				tail = o
			}
			out = append(out, tail)
		}
	}
	return out
}

// cfg compiles g to a context-free grammar for the Earley recognizer.
func (g *EBNF) cfg() (*cfg, error) {
	b := &cfgBuilder{c: &cfg{}, rules: map[string]int32{}, g: g}
	start := b.newRule()
	root := b.ref("root")
	b.addProd(start, []int32{root})
	if b.err != nil {
		return nil, b.err
	}
	c := b.c
	c.accept = c.prods[start][0] + 1
	n := len(c.prods)
	// Nullable and productive rules (fixed points).
	c.nullable = make([]bool, n)
	productive := make([]bool, n)
	for changed := true; changed; {
		changed = false
		for r := range n {
			for _, p := range c.prods[r] {
				allNull, allProd := true, true
				for i := p; c.syms[i] != endSym; i++ {
					s := c.syms[i]
					if s >= 0 {
						allNull = allNull && c.nullable[s]
						allProd = allProd && productive[s]
					} else {
						allNull = false
					}
				}
				if allNull && !c.nullable[r] {
					c.nullable[r], changed = true, true
				}
				if allProd && !productive[r] {
					productive[r], changed = true, true
				}
			}
		}
	}
	if !productive[start] {
		return nil, errors.New("ebnf: the grammar matches nothing (its rules never end)")
	}
	// Drop productions through rules that derive nothing, so that every
	// item the parser keeps can still reach a match.
	for r := range n {
		kept := c.prods[r][:0]
		for _, p := range c.prods[r] {
			ok := true
			for i := p; c.syms[i] != endSym; i++ {
				if s := c.syms[i]; s >= 0 && !productive[s] {
					ok = false
				}
			}
			if ok {
				kept = append(kept, p)
			}
		}
		c.prods[r] = kept
	}
	return c, nil
}

// item is an Earley item: a position in cfg.syms (the dot) and the column
// its production started in.
type item struct{ pos, origin int32 }

// earley is a parse in progress: the columns of items, one per byte read
// plus the initial one. Columns are appended and truncated (to try bytes
// and take them back), never changed in place.
type earley struct {
	c      *cfg
	items  []item
	starts []int32 // column k's items begin at starts[k]
	accept []bool  // column k holds the finished start production

	// Scratch for building a column: a set of items stamped by column
	// generation, and the rules predicted in it.
	gen       uint32
	setKeys   []uint64
	setGen    []uint32
	predicted []uint32
}

func newEarley(c *cfg) *earley {
	e := &earley{c: c, predicted: make([]uint32, len(c.prods))}
	e.growSet(64)
	e.starts = append(e.starts, 0)
	e.beginColumn()
	e.add(item{c.prods[0][0], 0})
	e.accept = append(e.accept, false)
	e.close(0)
	return e
}

func (e *earley) growSet(n int) {
	e.setKeys = make([]uint64, n)
	e.setGen = make([]uint32, n)
}

// beginColumn starts a fresh item set for a new column.
func (e *earley) beginColumn() {
	e.gen++
	if e.gen == 0 { // wrapped: clear the stamps
		clear(e.setGen)
		clear(e.predicted)
		e.gen = 1
	}
}

// add appends it to the current (last) column unless it is there.
func (e *earley) add(it item) bool {
	col := len(e.items) - int(e.starts[len(e.starts)-1])
	if 2*(col+1) > len(e.setKeys) {
		// Rehash the current column into a bigger set.
		e.growSet(4 * len(e.setKeys))
		for _, x := range e.items[e.starts[len(e.starts)-1]:] {
			e.insert(x)
		}
	}
	if !e.insert(it) {
		return false
	}
	e.items = append(e.items, it)
	return true
}

// insert adds it to the stamped set; false if present.
func (e *earley) insert(it item) bool {
	key := uint64(uint32(it.pos))<<32 | uint64(uint32(it.origin))
	mask := uint64(len(e.setKeys) - 1)
	h := (key * 0x9E3779B97F4A7C15) >> 20 & mask
	for {
		if e.setGen[h] != e.gen {
			e.setGen[h], e.setKeys[h] = e.gen, key
			return true
		}
		if e.setKeys[h] == key {
			return false
		}
		h = (h + 1) & mask
	}
}

// close completes column k (the last): predictions and completions until
// nothing changes. It reports false when the column passes maxColumnItems.
func (e *earley) close(k int) bool {
	c := e.c
	start := int(e.starts[k])
	for i := start; i < len(e.items); i++ {
		if len(e.items)-start > maxColumnItems {
			return false
		}
		it := e.items[i]
		s := c.syms[it.pos]
		switch {
		case s == endSym:
			if int(it.origin) == k {
				if it.pos == c.accept {
					e.accept[k] = true
				}
				continue // a nullable rule: its predictors moved past it already
			}
			if it.pos == c.accept && it.origin == 0 {
				e.accept[k] = true
			}
			r := c.lhs[it.pos]
			from, to := e.starts[it.origin], e.starts[it.origin+1]
			for j := from; j < to; j++ {
				w := e.items[j]
				if c.syms[w.pos] == r {
					e.add(item{w.pos + 1, w.origin})
				}
			}
		case s >= 0:
			if e.predicted[s] != e.gen {
				e.predicted[s] = e.gen
				for _, p := range c.prods[s] {
					e.add(item{p, int32(k)})
				}
			}
			if c.nullable[s] {
				e.add(item{it.pos + 1, it.origin})
			}
		}
	}
	return true
}

// cols is the number of columns (bytes read + 1).
func (e *earley) cols() int { return len(e.starts) }

// step reads byte b: true and a new column, or false and no change.
func (e *earley) step(b byte) bool {
	c := e.c
	k := len(e.starts) - 1
	from, to := int(e.starts[k]), len(e.items)
	e.starts = append(e.starts, int32(to))
	e.accept = append(e.accept, false)
	e.beginColumn()
	for i := from; i < to; i++ {
		it := e.items[i]
		if s := c.syms[it.pos]; s < 0 && s != endSym {
			if t := c.terms[-s-1]; t.lo <= b && b <= t.hi {
				e.add(item{it.pos + 1, it.origin})
			}
		}
	}
	if len(e.items) == to || !e.close(k+1) {
		e.truncate(k + 1)
		return false
	}
	return true
}

// truncate keeps the first n columns.
func (e *earley) truncate(n int) {
	if n >= len(e.starts) {
		return
	}
	e.items = e.items[:e.starts[n]]
	e.starts = e.starts[:n]
	e.accept = e.accept[:n]
}

// accepting reports whether the bytes read are a full match.
func (e *earley) accepting() bool { return e.accept[len(e.accept)-1] }

// Match reports whether s is a full match of g (an Earley parse, for
// recursive and regular grammars alike).
func (g *EBNF) Match(s string) bool {
	c, err := g.cfg()
	if err != nil {
		return false
	}
	e := newEarley(c)
	for i := 0; i < len(s); i++ {
		if !e.step(s[i]) {
			return false
		}
	}
	return e.accepting()
}

// mask returns the bitset of tokens whose bytes the parse e can read
// next, the EOS tokens included when it is accepting: one preorder pass
// over the vocabulary trie, each node a step and each subtree left a
// truncation.
func (v *Vocab) cfgMask(e *earley) []uint64 {
	m := make([]uint64, (v.size+63)/64)
	if e.accepting() {
		for _, t := range v.eos {
			if t >= 0 && int(t) < v.size {
				m[t>>6] |= 1 << (t & 63)
			}
		}
	}
	base := e.cols()
	n := int32(len(v.nb))
	for i := int32(1); i < n; {
		dep := int(v.depth[i])
		e.truncate(base + dep - 1)
		if !e.step(v.nb[i]) {
			i = v.end[i]
			continue
		}
		for _, t := range v.toks[v.tokOff[i]:v.tokOff[i+1]] {
			m[t>>6] |= 1 << (t & 63)
		}
		i++
	}
	e.truncate(base)
	return m
}

// cfgParse is a Constraint's state for a context-free grammar: the parse
// and the mask of the current position once computed.
type cfgParse struct {
	e    *earley
	mask []uint64 // nil until built for this position
}

// cfgDense: a parse position from which at least this many byte values
// continue allows most of the vocabulary (see denseFanout).
const cfgDense = denseFanout

// cfgAllow answers Allow for a context-free grammar: by parsing the
// token's bytes for the first directChecks tokens at a position, then from
// the position's mask.
func (c *Constraint) cfgAllow(t int32) bool {
	p, v := c.cp, c.g.vocab
	if p.mask == nil && c.checks >= directChecks {
		p.mask = v.cfgMask(p.e)
	}
	if p.mask != nil {
		return p.mask[t>>6]>>(t&63)&1 != 0
	}
	c.checks++
	if v.isEOS(t) {
		return p.e.accepting()
	}
	if v.tok.IsSpecial(t) {
		return false
	}
	b, ok := v.tok.TokenBytes(t)
	if !ok || len(b) == 0 {
		return false
	}
	n := p.e.cols()
	defer p.e.truncate(n)
	for _, ch := range b {
		if !p.e.step(ch) {
			return false
		}
	}
	return true
}

// cfgMask gives the mask of the current position, or nil where many bytes
// continue the parse (the sampler's draw is then almost always allowed).
func (c *Constraint) cfgMask() []uint64 {
	p := c.cp
	if p.mask != nil {
		return p.mask
	}
	n := p.e.cols()
	fan := 0
	for b := range 256 {
		if p.e.step(byte(b)) {
			fan++
			p.e.truncate(n)
		}
	}
	if fan >= cfgDense {
		return nil
	}
	p.mask = c.g.vocab.cfgMask(p.e)
	return p.mask
}

// cfgAdvance reads token t's bytes.
func (c *Constraint) cfgAdvance(t int32) {
	p := c.cp
	p.mask = nil
	b, ok := c.g.vocab.tok.TokenBytes(t)
	if !ok || c.g.vocab.tok.IsSpecial(t) {
		c.state = -1
		return
	}
	for _, ch := range b {
		if !p.e.step(ch) {
			c.state = -1
			return
		}
	}
}
