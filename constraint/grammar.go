// Package constraint keeps generated text inside what a request asked for
// (structured output); its Constraints implement engine.Constraint.
//
// A regex (SGLang's sampling_params.regex, regex.go) or a JSON Schema
// (response_format json_schema, sampling_params.json_schema; schema.go,
// which turns the schema into a regex) compiles to a DFA over bytes, and a Constraint
// (grammar.go) allows a token when its bytes keep the output a prefix of
// some match, and an end-of-sequence token only on a full match. Each DFA
// state's token mask is computed once, by one pass over the vocabulary's
// byte trie (vocab.go), and cached in the Grammar that every request with
// the same regex or schema shares. Structural tags (structtag.go) and EBNF
// grammars whose rules do not recurse (ebnf.go) compile to such a DFA as
// well, through an NFA builder (nfabuild.go).
//
// A recursive EBNF grammar is context-free: it compiles to productions
// over byte ranges that each Constraint parses with an Earley recognizer
// (earley.go), its token mask one trie walk per output position.
//
// Subpackage jsonobject handles response_format json_object (any JSON
// object, which no regex describes) with a byte-level pushdown automaton.
package constraint

import (
	"sync/atomic"
)

// Grammar is a compiled constraint for one vocabulary: its DFA and the
// token masks of the states visited so far, or (for a recursive EBNF
// grammar) a context-free grammar that each Constraint parses with an
// Earley recognizer. It is safe for concurrent use.
type Grammar struct {
	cfg    *cfg // non-nil: context-free, dfa and masks unused
	dfa    *DFA
	vocab  *Vocab
	masks  []atomic.Pointer[[]uint64] // per DFA state, built on demand
	cached atomic.Int32               // masks stored
}

// maxCachedMasks bounds the masks one Grammar keeps (19 KB each on a
// 152k vocabulary); past it masks are computed and dropped.
const maxCachedMasks = 1024

// denseFanout: a state from which at least this many byte values continue
// (inside a string, say) allows most of the vocabulary; its mask costs a
// walk of nearly the whole trie, while a token picked from the logits is
// almost always allowed, so Constraint.Mask leaves such states to Allow.
const denseFanout = 96

// NewGrammar binds d to vocabulary v.
func NewGrammar(d *DFA, v *Vocab) *Grammar {
	return &Grammar{dfa: d, vocab: v, masks: make([]atomic.Pointer[[]uint64], d.NumStates())}
}

// DFA returns g's automaton (nil for a context-free grammar).
func (g *Grammar) DFA() *DFA { return g.dfa }

// Mask returns the bitset (bit t of word t/64) of the tokens allowed in
// DFA state s, the EOS tokens included when s is accepting; it is computed
// on first use and then shared. The caller must not modify it. A
// context-free grammar has no states: nil.
func (g *Grammar) Mask(s int32) []uint64 {
	if g.cfg != nil {
		return nil
	}
	if m := g.masks[s].Load(); m != nil {
		return *m
	}
	m := g.vocab.mask(g.dfa, s)
	if g.cached.Load() < maxCachedMasks && g.masks[s].CompareAndSwap(nil, &m) {
		g.cached.Add(1)
	}
	return m
}

// CachedMasks is the number of states whose mask is cached.
func (g *Grammar) CachedMasks() int { return int(g.cached.Load()) }

// directChecks is how many Allow calls a Constraint answers by walking the
// DFA over the token's bytes, in one state, before it takes the state's
// whole-vocabulary mask: greedy decoding usually needs one or two checks,
// while filtering the vocabulary needs the mask.
const directChecks = 16

// Constraint is one sequence's position in a Grammar; it implements
// engine/sample.Constraint. Not safe for concurrent use.
type Constraint struct {
	g      *Grammar
	cp     *cfgParse // context-free grammars only
	state  int32     // -1 once the output left the language
	checks int       // direct checks in this state
}

// NewConstraint starts a sequence at g's initial state.
func (g *Grammar) NewConstraint() *Constraint {
	if g.cfg != nil {
		return &Constraint{g: g, cp: &cfgParse{e: newEarley(g.cfg)}}
	}
	return &Constraint{g: g, state: g.dfa.start}
}

// State is the current DFA state (-1 after a token the grammar rejects;
// for a context-free grammar 0 while the output is a prefix of a match).
func (c *Constraint) State() int32 { return c.state }

// Complete reports whether the output so far is a full match.
func (c *Constraint) Complete() bool {
	if c.cp != nil {
		return c.state >= 0 && c.cp.e.accepting()
	}
	return c.g.dfa.Accepting(c.state)
}

// Allow reports whether token t may come next.
func (c *Constraint) Allow(t int32) bool {
	if c.state < 0 || t < 0 || int(t) >= c.g.vocab.size {
		return false
	}
	if c.cp != nil {
		return c.cfgAllow(t)
	}
	if m := c.g.masks[c.state].Load(); m != nil {
		return (*m)[t>>6]>>(t&63)&1 != 0
	}
	if c.checks >= directChecks {
		m := c.g.Mask(c.state)
		return m[t>>6]>>(t&63)&1 != 0
	}
	c.checks++
	v := c.g.vocab
	if v.isEOS(t) {
		return c.g.dfa.accept[c.state]
	}
	if v.tok.IsSpecial(t) {
		return false
	}
	b, ok := v.tok.TokenBytes(t)
	if !ok || len(b) == 0 {
		return false
	}
	st := c.state
	for _, ch := range b {
		if st = c.g.dfa.Step(st, ch); st < 0 {
			return false
		}
	}
	return true
}

// Mask returns the bitset of the tokens allowed next (see Grammar.Mask);
// engine/sample applies it to the logits row in one pass instead of asking
// Allow token by token. It gives the (cached, or built: a cheap trie walk)
// mask of a sparse state, and nil for a dense one: there the sampler's
// first draw is almost always allowed, and one Allow costs less than
// masking the row.
func (c *Constraint) Mask() []uint64 {
	if c.state < 0 {
		return make([]uint64, (c.g.vocab.size+63)/64)
	}
	if c.cp != nil {
		return c.cfgMask()
	}
	if c.g.dfa.fanout[c.state] >= denseFanout {
		return nil
	}
	return c.g.Mask(c.state)
}

// Advance records token t (an EOS token leaves the state as it is).
func (c *Constraint) Advance(t int32) {
	if c.state < 0 || c.g.vocab.isEOS(t) {
		return
	}
	c.checks = 0
	if c.cp != nil {
		c.cfgAdvance(t)
		return
	}
	b, ok := c.g.vocab.tok.TokenBytes(t)
	if !ok || c.g.vocab.tok.IsSpecial(t) {
		c.state = -1
		return
	}
	for _, ch := range b {
		if c.state = c.g.dfa.Step(c.state, ch); c.state < 0 {
			return
		}
	}
}
