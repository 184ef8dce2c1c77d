package constraint

import (
	"bytes"
	"fmt"
	"slices"
)

// Tokenizer gives the bytes of each token; *tokenizer.Tokenizer and the
// server's tokenizers implement it.
type Tokenizer interface {
	TokenBytes(id int32) ([]byte, bool)
	IsSpecial(id int32) bool
}

// Vocab is a tokenizer's vocabulary as a byte trie in preorder, built once
// per model and shared by every grammar: computing the tokens a DFA state
// allows is one pass over the trie that skips the subtrees a state rejects.
type Vocab struct {
	size   int
	tok    Tokenizer
	eos    []int32
	nb     []byte  // node i's byte (node 0 is the root)
	depth  []int32 // node i's depth (root 0)
	end    []int32 // one past the last node of i's subtree
	tokOff []int32 // tokens ending at node i: toks[tokOff[i]:tokOff[i+1]]
	toks   []int32
}

// NewVocab indexes the size token ids of tok. Special tokens and ids
// without bytes are never allowed; eos are the tokens that end a sequence,
// allowed exactly when the output is a full match.
func NewVocab(tok Tokenizer, size int, eos []int32) (*Vocab, error) {
	if size <= 0 || size > 1<<24 {
		return nil, fmt.Errorf("constraint: vocabulary size %d out of range", size)
	}
	type entry struct {
		b  []byte
		id int32
	}
	var es []entry
	for id := range int32(size) {
		if tok.IsSpecial(id) || slices.Contains(eos, id) {
			continue
		}
		b, ok := tok.TokenBytes(id)
		if !ok || len(b) == 0 {
			continue
		}
		es = append(es, entry{b, id})
	}
	slices.SortFunc(es, func(a, b entry) int {
		if c := bytes.Compare(a.b, b.b); c != 0 {
			return c
		}
		return int(a.id - b.id)
	})
	v := &Vocab{size: size, tok: tok, eos: slices.Clone(eos)}
	v.nb, v.depth = append(v.nb, 0), append(v.depth, 0)
	var tokAt []int32 // node of each entry
	path := []int32{0}
	var prev []byte
	for _, e := range es {
		common := 0
		for common < len(prev) && common < len(e.b) && prev[common] == e.b[common] {
			common++
		}
		path = path[:common+1]
		for _, c := range e.b[common:] {
			v.nb = append(v.nb, c)
			v.depth = append(v.depth, int32(len(path)))
			path = append(path, int32(len(v.nb)-1))
		}
		tokAt = append(tokAt, path[len(path)-1])
		prev = e.b
	}
	n := len(v.nb)
	v.end = make([]int32, n)
	// A node's subtree ends at the next node no deeper than it.
	stack := []int32{}
	for i := range n {
		for len(stack) > 0 && v.depth[stack[len(stack)-1]] >= v.depth[i] {
			v.end[stack[len(stack)-1]] = int32(i)
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, int32(i))
	}
	for _, s := range stack {
		v.end[s] = int32(n)
	}
	v.tokOff = make([]int32, n+1)
	for _, node := range tokAt {
		v.tokOff[node+1]++
	}
	for i := range n {
		v.tokOff[i+1] += v.tokOff[i]
	}
	v.toks = make([]int32, len(es))
	fill := slices.Clone(v.tokOff[:n])
	for k, node := range tokAt {
		v.toks[fill[node]] = es[k].id
		fill[node]++
	}
	return v, nil
}

// Size is the number of token ids.
func (v *Vocab) Size() int { return v.size }

// isEOS reports whether t ends a sequence.
func (v *Vocab) isEOS(t int32) bool { return slices.Contains(v.eos, t) }

// mask returns the bitset of tokens allowed in state s: those whose bytes
// d accepts from s, found in one preorder pass over the trie that skips
// the subtree of every node whose byte leads to a dead state, and the EOS
// tokens when s is accepting.
func (v *Vocab) mask(d *DFA, s int32) []uint64 {
	m := make([]uint64, (v.size+63)/64)
	if d.Accepting(s) {
		for _, t := range v.eos {
			if t >= 0 && int(t) < v.size {
				m[t>>6] |= 1 << (t & 63)
			}
		}
	}
	states := make([]int32, 0, 64)
	states = append(states, s)
	n := int32(len(v.nb))
	for i := int32(1); i < n; {
		dep := v.depth[i]
		states = states[:dep]
		st := d.Step(states[dep-1], v.nb[i])
		if st < 0 {
			i = v.end[i]
			continue
		}
		states = append(states, st)
		for _, t := range v.toks[v.tokOff[i]:v.tokOff[i+1]] {
			m[t>>6] |= 1 << (t & 63)
		}
		i++
	}
	return m
}
