package constraint

import (
	"fmt"
	"regexp/syntax"
	"slices"
)

// frag is a piece of an NFA under construction: the state it is entered
// at and the state it leaves from (by an epsilon move added later).
type frag struct{ in, out int32 }

// builder assembles an NFA from pieces (literals, byte and rune ranges,
// regex programs, text that avoids given strings) joined by concatenation,
// alternation and repetition, then determinizes it. The first error
// (a limit passed) sticks and is returned by finish.
type builder struct {
	n   nfa
	err error
}

// state adds a state, checking the NFA size limit.
func (b *builder) state() int32 {
	s := b.n.add()
	if len(b.n.match) > maxNFAStates && b.err == nil {
		b.err = fmt.Errorf("automaton needs over %d NFA states: %w", maxNFAStates, ErrTooLarge)
	}
	return s
}

func (b *builder) eps(from, to int32) { b.n.eps[from] = append(b.n.eps[from], to) }

// empty matches the empty string.
func (b *builder) empty() frag {
	s := b.state()
	return frag{s, s}
}

// lit matches the bytes of s.
func (b *builder) lit(s string) frag {
	in := b.state()
	at := in
	for i := 0; i < len(s) && b.err == nil; i++ {
		nx := b.state()
		b.n.edges[at] = append(b.n.edges[at], nedge{s[i], s[i], nx})
		at = nx
	}
	return frag{in, at}
}

// byteRange matches one byte in [lo, hi].
func (b *builder) byteRange(lo, hi byte) frag {
	in, out := b.state(), b.state()
	b.n.edges[in] = append(b.n.edges[in], nedge{lo, hi, out})
	return frag{in, out}
}

// runes matches the UTF-8 encoding of one rune in the ranges (pairs lo, hi).
func (b *builder) runes(ranges []rune) frag {
	in, out := b.state(), b.state()
	for i := 0; i+1 < len(ranges) && b.err == nil; i += 2 {
		b.n.addRunes(in, out, ranges[i], ranges[i+1])
		if len(b.n.match) > maxNFAStates {
			b.err = fmt.Errorf("automaton needs over %d NFA states: %w", maxNFAStates, ErrTooLarge)
		}
	}
	return frag{in, out}
}

// cat matches the pieces one after another.
func (b *builder) cat(fs ...frag) frag {
	if len(fs) == 0 {
		return b.empty()
	}
	for i := 1; i < len(fs); i++ {
		b.eps(fs[i-1].out, fs[i].in)
	}
	return frag{fs[0].in, fs[len(fs)-1].out}
}

// alt matches any one of the pieces (none: nothing).
func (b *builder) alt(fs ...frag) frag {
	in, out := b.state(), b.state()
	for _, f := range fs {
		b.eps(in, f.in)
		b.eps(f.out, out)
	}
	return frag{in, out}
}

// star matches f zero or more times.
func (b *builder) star(f frag) frag {
	s := b.state()
	b.eps(s, f.in)
	b.eps(f.out, s)
	return frag{s, s}
}

// plus matches f one or more times.
func (b *builder) plus(f frag) frag {
	out := b.state()
	b.eps(f.out, f.in)
	b.eps(f.out, out)
	return frag{f.in, out}
}

// opt matches f or the empty string.
func (b *builder) opt(f frag) frag { return b.alt(f, b.empty()) }

// maxRepeat bounds the copies a bounded repetition makes.
const maxRepeat = 1000

// repeat matches min to max (max < 0: any number of) pieces, each made by
// gen (a repetition needs fresh states per copy).
func (b *builder) repeat(gen func() frag, min, max int) frag {
	if min > maxRepeat || max > maxRepeat {
		if b.err == nil {
			b.err = fmt.Errorf("repetition bound over %d: %w", maxRepeat, ErrTooLarge)
		}
		return b.empty()
	}
	var parts []frag
	for range min {
		if b.err != nil {
			return b.empty()
		}
		parts = append(parts, gen())
	}
	switch {
	case max < 0:
		parts = append(parts, b.star(gen()))
	default:
		// Optional copies nest: (x(x(x)?)?)?
		var tail *frag
		for range max - min {
			if b.err != nil {
				return b.empty()
			}
			f := gen()
			if tail != nil {
				f = b.cat(f, *tail)
			}
			o := b.opt(f)
			tail = &o
		}
		if tail != nil {
			parts = append(parts, *tail)
		}
	}
	return b.cat(parts...)
}

// regex matches a full match of the parsed regex re.
func (b *builder) regex(re *syntax.Regexp) frag {
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		b.fail(fmt.Errorf("regex: %w", err))
		return b.empty()
	}
	if len(prog.Inst) > maxProgInsts {
		b.fail(fmt.Errorf("regex compiles to %d instructions, over the limit %d: %w", len(prog.Inst), maxProgInsts, ErrTooLarge))
		return b.empty()
	}
	in, out, err := b.n.addProg(prog)
	if err != nil {
		b.fail(err)
		return b.empty()
	}
	return frag{in, out}
}

func (b *builder) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// avoiding matches any byte string in which none of strs occurs: an
// Aho-Corasick automaton over strs whose every state may end the piece,
// with no move that would complete one of strs.
func (b *builder) avoiding(strs []string) frag {
	// Trie of strs.
	type node struct {
		next [256]int32
		fail int32
		bad  bool // some string ends here or at a suffix
	}
	nodes := []node{{}}
	for _, s := range strs {
		at := int32(0)
		for i := 0; i < len(s); i++ {
			c := s[i]
			if nodes[at].next[c] == 0 {
				nodes = append(nodes, node{})
				nodes[at].next[c] = int32(len(nodes) - 1)
			}
			at = nodes[at].next[c]
		}
		nodes[at].bad = true
	}
	// Breadth-first failure links; next becomes the full goto function.
	queue := []int32{}
	for c := range 256 {
		if t := nodes[0].next[c]; t != 0 {
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		nodes[q].bad = nodes[q].bad || nodes[nodes[q].fail].bad
		for c := range 256 {
			t := nodes[q].next[c]
			if t == 0 {
				nodes[q].next[c] = nodes[nodes[q].fail].next[c]
				continue
			}
			nodes[t].fail = nodes[nodes[q].fail].next[c]
			queue = append(queue, t)
		}
	}
	// One NFA state per safe node; edges in runs of equal targets.
	ids := make([]int32, len(nodes))
	for i := range nodes {
		ids[i] = -1
		if !nodes[i].bad {
			ids[i] = b.state()
		}
	}
	out := b.state()
	for i := range nodes {
		if nodes[i].bad {
			continue
		}
		from := ids[i]
		b.eps(from, out)
		for c := 0; c < 256; {
			t := nodes[i].next[c]
			e := c
			for e+1 < 256 && nodes[i].next[e+1] == t {
				e++
			}
			if !nodes[t].bad {
				b.n.edges[from] = append(b.n.edges[from], nedge{byte(c), byte(e), ids[t]})
			}
			c = e + 1
		}
	}
	return frag{ids[0], out}
}

// finish determinizes the NFA that f makes of the whole output.
func (b *builder) finish(f frag) (*DFA, error) {
	if b.err != nil {
		return nil, b.err
	}
	b.n.match[f.out] = true
	d, err := b.n.determinize(f.in)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// anyByte matches one byte of any value.
func (b *builder) anyByte() frag { return b.byteRange(0, 0xff) }

// sortedUnique returns strs sorted without duplicates.
func sortedUnique(strs []string) []string {
	out := slices.Clone(strs)
	slices.Sort(out)
	return slices.Compact(out)
}
