package constraint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"unicode"
)

// Limits on what a regex (or a schema, which compiles to one) may cost.
const (
	// MaxStates bounds the states of a compiled DFA.
	MaxStates = 32768
	// maxProgInsts bounds the Thompson program a regex compiles to.
	maxProgInsts = 100000
	// maxNFAStates bounds the byte-level NFA.
	maxNFAStates = 400000
	// maxWork bounds the subset construction (NFA states visited).
	maxWork = 50_000_000
)

// ErrTooLarge reports a regex or schema whose automaton passes the limits.
var ErrTooLarge = errors.New("constraint is too large")

// DFA is a deterministic automaton over bytes that accepts the full
// matches of a regex. Dead states are pruned: Step returns -1 once no
// continuation can match.
type DFA struct {
	class  [256]uint8 // byte -> equivalence class
	nclass int
	next   []int32 // state*nclass + class -> state, -1 dead
	accept []bool
	fanout []uint16 // per state: how many byte values lead to a live state
	start  int32
}

// NumStates is the number of live states.
func (d *DFA) NumStates() int { return len(d.accept) }

// Start is the initial state.
func (d *DFA) Start() int32 { return d.start }

// Step returns the state after byte b from state s, or -1.
func (d *DFA) Step(s int32, b byte) int32 {
	return d.next[int(s)*d.nclass+int(d.class[b])]
}

// Accepting reports whether the input that led to s is a full match.
func (d *DFA) Accepting(s int32) bool { return s >= 0 && d.accept[s] }

// Match reports whether s is a full match of d's regex.
func (d *DFA) Match(s string) bool {
	st := d.start
	for i := 0; i < len(s) && st >= 0; i++ {
		st = d.Step(st, s[i])
	}
	return d.Accepting(st)
}

// Prefix reports whether s is a prefix of some full match.
func (d *DFA) Prefix(s string) bool {
	st := d.start
	for i := 0; i < len(s) && st >= 0; i++ {
		st = d.Step(st, s[i])
	}
	return st >= 0
}

// CompileRegex compiles expr (Go/RE2 syntax, Perl flags) to a DFA over
// the bytes of its UTF-8 matches. The whole output must match, as in
// SGLang's regex constraint: a leading ^ and a trailing $ are accepted and
// mean nothing more; other anchors and word boundaries are refused.
func CompileRegex(expr string) (*DFA, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("regex: %w", err)
	}
	re, err = stripAnchors(re)
	if err != nil {
		return nil, err
	}
	return compileTree(re)
}

func compileTree(re *syntax.Regexp) (*DFA, error) {
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, fmt.Errorf("regex: %w", err)
	}
	if len(prog.Inst) > maxProgInsts {
		return nil, fmt.Errorf("regex compiles to %d instructions, over the limit %d: %w", len(prog.Inst), maxProgInsts, ErrTooLarge)
	}
	n := &nfa{}
	start, out, err := n.addProg(prog)
	if err != nil {
		return nil, err
	}
	n.match[out] = true
	return n.determinize(start)
}

// stripAnchors removes the anchors at the ends of the pattern (a full match
// is implied) and refuses any other zero-width assertion.
func stripAnchors(re *syntax.Regexp) (*syntax.Regexp, error) {
	isBegin := func(r *syntax.Regexp) bool { return r.Op == syntax.OpBeginText || r.Op == syntax.OpBeginLine }
	isEnd := func(r *syntax.Regexp) bool { return r.Op == syntax.OpEndText || r.Op == syntax.OpEndLine }
	var strip func(r *syntax.Regexp, first, last bool) *syntax.Regexp
	strip = func(r *syntax.Regexp, first, last bool) *syntax.Regexp {
		switch {
		case first && isBegin(r), last && isEnd(r):
			return &syntax.Regexp{Op: syntax.OpEmptyMatch}
		case r.Op == syntax.OpAlternate:
			for i, s := range r.Sub {
				r.Sub[i] = strip(s, first, last)
			}
		case r.Op == syntax.OpCapture:
			r.Sub[0] = strip(r.Sub[0], first, last)
		case r.Op == syntax.OpConcat && len(r.Sub) > 0:
			r.Sub[0] = strip(r.Sub[0], first, last && len(r.Sub) == 1)
			if len(r.Sub) > 1 {
				r.Sub[len(r.Sub)-1] = strip(r.Sub[len(r.Sub)-1], false, last)
			}
		}
		return r
	}
	re = strip(re, true, true)
	var bad error
	var walk func(r *syntax.Regexp)
	walk = func(r *syntax.Regexp) {
		switch r.Op {
		case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
			bad = errors.New("regex: anchors (^, $, \\A, \\z) are only supported at the start and end of the pattern")
		case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
			bad = errors.New("regex: word boundaries (\\b, \\B) are not supported")
		}
		for _, s := range r.Sub {
			walk(s)
		}
	}
	walk(re)
	return re, bad
}

type nedge struct {
	lo, hi byte
	to     int32
}

// nfa is a byte-level automaton with epsilon moves.
type nfa struct {
	eps   [][]int32
	edges [][]nedge
	match []bool
}

func (n *nfa) add() int32 {
	n.eps = append(n.eps, nil)
	n.edges = append(n.edges, nil)
	n.match = append(n.match, false)
	return int32(len(n.match) - 1)
}

// runeRanges returns inst's rune ranges as pairs, case folding included.
func runeRanges(inst *syntax.Inst) []rune {
	switch inst.Op {
	case syntax.InstRune1:
		return []rune{inst.Rune[0], inst.Rune[0]}
	case syntax.InstRuneAny:
		return []rune{0, unicode.MaxRune}
	case syntax.InstRuneAnyNotNL:
		return []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}
	}
	if len(inst.Rune) == 1 {
		r0 := inst.Rune[0]
		out := []rune{r0, r0}
		if syntax.Flags(inst.Arg)&syntax.FoldCase != 0 {
			for r := unicode.SimpleFold(r0); r != r0; r = unicode.SimpleFold(r) {
				out = append(out, r, r)
			}
		}
		return out
	}
	return inst.Rune
}

// addProg adds prog's instructions to n as states (with byte edges for
// its runes) and returns the state it starts at and a fresh state that its
// matches reach by an epsilon move (not marked as a match).
func (n *nfa) addProg(prog *syntax.Prog) (start, out int32, err error) {
	base := int32(len(n.match))
	for range prog.Inst {
		n.add()
	}
	out = n.add()
	for pc := range prog.Inst {
		inst := &prog.Inst[pc]
		s := base + int32(pc)
		next := base + int32(inst.Out)
		switch inst.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			n.eps[s] = append(n.eps[s], next, base+int32(inst.Arg))
		case syntax.InstCapture, syntax.InstNop:
			n.eps[s] = append(n.eps[s], next)
		case syntax.InstMatch:
			n.eps[s] = append(n.eps[s], out)
		case syntax.InstFail:
		case syntax.InstEmptyWidth:
			return 0, 0, errors.New("regex: zero-width assertions are not supported")
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			rr := runeRanges(inst)
			for i := 0; i+1 < len(rr); i += 2 {
				n.addRunes(s, next, rr[i], rr[i+1])
				if len(n.match) > maxNFAStates {
					return 0, 0, fmt.Errorf("regex needs over %d NFA states: %w", maxNFAStates, ErrTooLarge)
				}
			}
		}
	}
	return base + int32(prog.Start), out, nil
}

// addRunes adds paths from state from to state to over the UTF-8
// encodings of the runes in [lo, hi].
func (n *nfa) addRunes(from, to int32, lo, hi rune) {
	utf8Sequences(lo, hi, func(seq []byteRange) {
		at := from
		for k, br := range seq {
			nx := to
			if k < len(seq)-1 {
				nx = n.add()
			}
			n.edges[at] = append(n.edges[at], nedge{br.lo, br.hi, nx})
			at = nx
		}
	})
}

// closure adds the epsilon closure of set to out (marks in seen) and
// returns the states that consume bytes or match, sorted.
func (n *nfa) closure(set []int32, seen []bool, stack, out []int32, work *int) []int32 {
	out = out[:0]
	stack = append(stack[:0], set...)
	for _, s := range set {
		seen[s] = true
	}
	var all []int32
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		all = append(all, s)
		*work++
		for _, t := range n.eps[s] {
			if !seen[t] {
				seen[t] = true
				stack = append(stack, t)
			}
		}
	}
	for _, s := range all {
		seen[s] = false
		if len(n.edges[s]) > 0 || n.match[s] {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func setKey(set []int32) string {
	b := make([]byte, 4*len(set))
	for i, s := range set {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(s))
	}
	return string(b)
}

// determinize runs the subset construction from start, then prunes the
// states from which no match is reachable.
func (n *nfa) determinize(start int32) (*DFA, error) {
	d := &DFA{}
	var bound [257]bool
	bound[0] = true
	for _, es := range n.edges {
		for _, e := range es {
			bound[e.lo] = true
			bound[int(e.hi)+1] = true
		}
	}
	cls := -1
	var rep []byte // a byte of each class
	for b := range 256 {
		if bound[b] {
			cls++
			rep = append(rep, byte(b))
		}
		d.class[b] = uint8(cls)
	}
	d.nclass = cls + 1

	seen := make([]bool, len(n.match))
	var stack, next []int32
	work := 0
	index := map[string]int32{}
	var sets [][]int32
	var trans []int32
	var accept []bool
	addSet := func(set []int32) (int32, error) {
		k := setKey(set)
		if id, ok := index[k]; ok {
			return id, nil
		}
		if len(sets) >= MaxStates {
			return 0, fmt.Errorf("automaton needs over %d states: %w", MaxStates, ErrTooLarge)
		}
		id := int32(len(sets))
		index[k] = id
		sets = append(sets, slices.Clone(set))
		m := false
		for _, s := range set {
			m = m || n.match[s]
		}
		accept = append(accept, m)
		return id, nil
	}
	s0, err := addSet(n.closure([]int32{start}, seen, stack, nil, &work))
	if err != nil {
		return nil, err
	}
	var out []int32
	for i := 0; i < len(sets); i++ {
		for c := 0; c < d.nclass; c++ {
			b := rep[c]
			next = next[:0]
			for _, s := range sets[i] {
				for _, e := range n.edges[s] {
					if e.lo <= b && b <= e.hi && !seen[e.to] {
						seen[e.to] = true
						next = append(next, e.to)
					}
				}
			}
			for _, s := range next {
				seen[s] = false
			}
			work += len(sets[i])
			if work > maxWork {
				return nil, fmt.Errorf("automaton construction passes its work limit: %w", ErrTooLarge)
			}
			if len(next) == 0 {
				trans = append(trans, -1)
				continue
			}
			out = n.closure(next, seen, stack, out, &work)
			if len(out) == 0 {
				trans = append(trans, -1)
				continue
			}
			id, err := addSet(out)
			if err != nil {
				return nil, err
			}
			trans = append(trans, id)
		}
	}
	// Prune states that cannot reach a match, renumbering the rest.
	ns := len(sets)
	live := slices.Clone(accept)
	rev := make([][]int32, ns) // predecessors
	for s := range ns {
		for c := 0; c < d.nclass; c++ {
			if t := trans[s*d.nclass+c]; t >= 0 && (len(rev[t]) == 0 || rev[t][len(rev[t])-1] != int32(s)) {
				rev[t] = append(rev[t], int32(s))
			}
		}
	}
	queue := make([]int32, 0, ns)
	for s := range ns {
		if live[s] {
			queue = append(queue, int32(s))
		}
	}
	for len(queue) > 0 {
		t := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, s := range rev[t] {
			if !live[s] {
				live[s] = true
				queue = append(queue, s)
			}
		}
	}
	if !live[s0] {
		return nil, errors.New("the constraint matches nothing")
	}
	renum := make([]int32, ns)
	k := int32(0)
	for s := range ns {
		renum[s] = -1
		if live[s] {
			renum[s] = k
			k++
		}
	}
	d.next = make([]int32, int(k)*d.nclass)
	d.accept = make([]bool, k)
	for s := range ns {
		if !live[s] {
			continue
		}
		r := renum[s]
		d.accept[r] = accept[s]
		for c := 0; c < d.nclass; c++ {
			t := trans[s*d.nclass+c]
			if t >= 0 {
				t = renum[t]
			}
			d.next[int(r)*d.nclass+c] = t
		}
	}
	d.start = renum[s0]
	d.fanout = make([]uint16, k)
	for s := range k {
		for b := range 256 {
			if d.Step(s, byte(b)) >= 0 {
				d.fanout[s]++
			}
		}
	}
	return d, nil
}
