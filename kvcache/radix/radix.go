// Package radix is the prefix cache of `kt serve` (SGLang's RadixAttention
// radix cache): a tree over token ids, one node per full KV page, whose
// pages (and, for models with linear-attention layers, recurrent-state
// snapshots) are kept after the sequence that wrote them ends, so a later
// sequence that starts with the same tokens attaches them instead of
// recomputing them.
//
// Only full pages are shared: a node is one page of PageSize tokens, and
// the tail of a sequence that does not fill a page is recomputed. Pages are
// reference-counted by the kvcache.Pool: the tree holds one reference on
// each page it keeps and every slot that attached it holds another, so a
// page some running sequence uses is never evicted or overwritten. When a
// Reserve finds too few free pages the pool asks the tree to evict: leaves
// no slot holds go first, least recently used first. Each LoRA adapter has
// its own tree, since the KV depends on the adapter.
//
// A Tree is not safe for concurrent use (the engine's scheduler goroutine
// owns the runner that owns it).
package radix

import (
	"container/heap"
	"encoding/binary"
	"fmt"

	"github.com/ktserve/kt/kvcache"
)

// NoSnapshot is the snapshot id of a node that has none.
const NoSnapshot = -1

// Tree is a prefix cache over a pool's pages.
type Tree struct {
	pool  *kvcache.Pool
	ps    int
	roots map[int]*node
	clock uint64
	pages int // nodes (pages held)
	snaps int // nodes with a snapshot
	// dropSnap releases a snapshot the tree no longer keeps.
	dropSnap func(id int)
}

type node struct {
	parent   *node
	children map[string]*node
	key      string // the page's tokens, encoded
	page     int32
	snap     int  // recurrent-state snapshot id after this page, or NoSnapshot
	shared   bool // snap is at a branch point several sequences pass (Share)
	last     uint64
}

// New makes an empty tree over pool and makes it the pool's reclaimer.
// dropSnap (nil when the model keeps no recurrent state) is called with
// the id of every snapshot the tree lets go of.
func New(pool *kvcache.Pool, dropSnap func(id int)) *Tree {
	t := &Tree{pool: pool, ps: pool.PageSize(), roots: map[int]*node{}, dropSnap: dropSnap}
	pool.SetReclaim(func(n int) { t.Evict(n) })
	return t
}

// Pages is the number of pages the tree holds.
func (t *Tree) Pages() int { return t.pages }

// Snapshots is the number of recurrent-state snapshots the tree holds.
func (t *Tree) Snapshots() int { return t.snaps }

func (t *Tree) key(tokens []int32) string {
	b := make([]byte, 4*len(tokens))
	for i, v := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return string(b)
}

// Match is the cached prefix of a sequence.
type Match struct {
	Tokens int     // tokens covered: len(Pages)·PageSize
	Pages  []int32 // the prefix's pages in position order
	// Snapshot is the recurrent-state snapshot at Tokens when the match
	// asked for one (NoSnapshot otherwise).
	Snapshot int
	// Path is the tokens of the whole cached pages along the sequence
	// (within the limit) before a needSnap match stops at its deepest
	// snapshot: where it is beyond Tokens, the prompt follows cached pages
	// that no kept state covers (a branch point).
	Path int
}

// Match finds the longest cached prefix of tokens under adapter made of
// whole pages, at most limit tokens long. With needSnap (models with
// recurrent state) it ends at the deepest node on that path holding a
// snapshot, since the state at any other position is unknown. The nodes
// on the path count as used now for the LRU order.
func (t *Tree) Match(adapter int, tokens []int32, limit int, needSnap bool) Match {
	m := Match{Snapshot: NoSnapshot}
	n := t.roots[adapter]
	if n == nil {
		return m
	}
	t.clock++
	var path []*node
	for pos := 0; pos+t.ps <= min(limit, len(tokens)); pos += t.ps {
		c := n.children[t.key(tokens[pos:pos+t.ps])]
		if c == nil {
			break
		}
		c.last = t.clock
		path = append(path, c)
		n = c
	}
	m.Path = len(path) * t.ps
	if needSnap {
		for len(path) > 0 && path[len(path)-1].snap == NoSnapshot {
			path = path[:len(path)-1]
		}
		if len(path) > 0 {
			m.Snapshot = path[len(path)-1].snap
		}
	}
	for _, c := range path {
		m.Pages = append(m.Pages, c.page)
	}
	m.Tokens = len(path) * t.ps
	return m
}

// Insert records that pages hold the KV of tokens under adapter, one page
// per PageSize tokens (len(tokens) must be len(pages)·PageSize); the pages
// must be held by a slot. Pages already cached for the same tokens are
// kept and the given duplicates are left to the slot. snap, unless
// NoSnapshot, is the recurrent-state snapshot after the last page; Insert
// reports whether the tree kept it (if not, the caller still owns it).
func (t *Tree) Insert(adapter int, tokens []int32, pages []int32, snap int) (bool, error) {
	if len(tokens) != len(pages)*t.ps {
		return false, fmt.Errorf("radix: inserting %d tokens over %d pages of %d", len(tokens), len(pages), t.ps)
	}
	if len(pages) == 0 {
		return false, nil
	}
	n := t.roots[adapter]
	if n == nil {
		n = &node{children: map[string]*node{}, page: -1, snap: NoSnapshot}
		t.roots[adapter] = n
	}
	t.clock++
	for i, pg := range pages {
		k := t.key(tokens[i*t.ps : (i+1)*t.ps])
		c := n.children[k]
		if c == nil {
			if err := t.pool.Retain(pg); err != nil {
				return false, fmt.Errorf("radix: %w", err)
			}
			c = &node{parent: n, key: k, page: pg, snap: NoSnapshot}
			if n.children == nil {
				n.children = map[string]*node{}
			}
			n.children[k] = c
			t.pages++
		}
		c.last = t.clock
		n = c
	}
	if snap == NoSnapshot {
		return false, nil
	}
	if n.snap != NoSnapshot {
		return false, nil // the same state is kept already
	}
	n.snap = snap
	t.snaps++
	return true, nil
}

// Evict frees up to n pages: leaves no slot holds, least recently used
// first (a parent left childless becomes a candidate). It returns the
// number freed.
func (t *Tree) Evict(n int) int {
	var h lru
	for _, r := range t.roots {
		t.walk(r, func(c *node) {
			if len(c.children) == 0 && t.pool.Refs(c.page) == 1 {
				h = append(h, c)
			}
		})
	}
	heap.Init(&h)
	freed := 0
	for freed < n && h.Len() > 0 {
		c := heap.Pop(&h).(*node)
		p := c.parent
		t.remove(c)
		freed++
		if p.parent != nil && len(p.children) == 0 && t.pool.Refs(p.page) == 1 {
			heap.Push(&h, p)
		}
	}
	return freed
}

// Share marks the snapshot at the end of tokens' whole pages under adapter
// (if that node has one) as shared: a branch point where sequences that
// share the prefix before it part. DropSnapshot gives shared snapshots up
// only when no other is left, since each serves every later sequence with
// the prefix, where the snapshot at a sequence's own end serves only its
// continuation.
func (t *Tree) Share(adapter int, tokens []int32) {
	n := t.roots[adapter]
	for pos := 0; n != nil && pos+t.ps <= len(tokens); pos += t.ps {
		n = n.children[t.key(tokens[pos:pos+t.ps])]
	}
	if n != nil && n.snap != NoSnapshot {
		n.shared = true
	}
}

// DropSnapshot lets go of the least recently used snapshot (its pages
// stay) to make room for a new one, unshared ones first (Share). It
// reports whether there was one.
func (t *Tree) DropSnapshot() bool {
	var old *node
	for _, r := range t.roots {
		t.walk(r, func(c *node) {
			if c.snap == NoSnapshot {
				return
			}
			if old == nil || old.shared && !c.shared || old.shared == c.shared && c.last < old.last {
				old = c
			}
		})
	}
	if old == nil {
		return false
	}
	t.releaseSnap(old)
	return true
}

// Flush drops every node (the pages slots still hold stay with them).
func (t *Tree) Flush() {
	for a, r := range t.roots {
		t.walk(r, func(c *node) {
			t.releaseSnap(c)
			t.pool.Release(c.page)
		})
		delete(t.roots, a)
	}
	t.pages = 0
}

func (t *Tree) releaseSnap(c *node) {
	if c.snap == NoSnapshot {
		return
	}
	if t.dropSnap != nil {
		t.dropSnap(c.snap)
	}
	c.snap, c.shared = NoSnapshot, false
	t.snaps--
}

func (t *Tree) remove(c *node) {
	t.releaseSnap(c)
	t.pool.Release(c.page)
	delete(c.parent.children, c.key)
	t.pages--
}

// walk calls f on every node below r (not r), children before parents.
func (t *Tree) walk(r *node, f func(*node)) {
	for _, c := range r.children {
		t.walk(c, f)
		f(c)
	}
}

// lru is a min-heap of nodes by last use.
type lru []*node

func (h lru) Len() int           { return len(h) }
func (h lru) Less(i, j int) bool { return h[i].last < h[j].last }
func (h lru) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lru) Push(x any)        { *h = append(*h, x.(*node)) }
func (h *lru) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
