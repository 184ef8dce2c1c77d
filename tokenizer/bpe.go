package tokenizer

import (
	"hash/maphash"
	"math"
	"slices"
	"sync"
)

// merge is the rank of a merge rule and the token it produces.
type merge struct {
	rank int32
	id   int32
}

// bpe is a byte-level BPE model over raw bytes: the vocabulary's byte-level
// strings are decoded once at load, so words need no character mapping.
type bpe struct {
	byteIDs      [256]int32       // token of each single byte
	merges       mergeTable       // (left, right) -> merge
	ignoreMerges bool             // a word that is a whole token is that token
	wordIDs      map[string]int32 // raw bytes -> id, only when ignoreMerges
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// smallWord is the longest word merged with the simple quadratic algorithm;
// longer ones use the heap, which is O(n log n).
const smallWord = 48

// runWord is the shortest word tried in run-length form first (mergeRuns).
const runWord = 256

// encodeWord appends the tokens of one pre-tokenized word.
func (m *bpe) encodeWord(dst []int32, w string) []int32 {
	if len(w) == 1 {
		return append(dst, m.byteIDs[w[0]])
	}
	if m.ignoreMerges {
		if id, ok := m.wordIDs[w]; ok {
			return append(dst, id)
		}
	}
	if len(w) <= smallWord {
		return m.mergeSmall(dst, w)
	}
	if len(w) >= runWord {
		if out, ok := m.mergeRuns(dst, w); ok {
			return out
		}
	}
	return m.mergeHeap(dst, w)
}

// mergeSmall repeatedly applies the lowest-ranked merge among adjacent
// symbols, the leftmost on ties, exactly like Hugging Face's BPE.
func (m *bpe) mergeSmall(dst []int32, w string) []int32 {
	var symBuf [smallWord]int32
	var rankBuf, idBuf [smallWord]int32
	n := len(w)
	syms, ranks, ids := symBuf[:n], rankBuf[:n-1], idBuf[:n-1]
	for i := 0; i < n; i++ {
		syms[i] = m.byteIDs[w[i]]
	}
	pair := func(i int) {
		if mg, ok := m.merges.get(pairKey(syms[i], syms[i+1])); ok {
			ranks[i], ids[i] = mg.rank, mg.id
		} else {
			ranks[i] = math.MaxInt32
		}
	}
	for i := 0; i < n-1; i++ {
		pair(i)
	}
	for len(syms) > 1 {
		best, bestRank := -1, int32(math.MaxInt32)
		for i, r := range ranks {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		syms[best] = ids[best]
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[best:], ranks[best+1:])
		copy(ids[best:], ids[best+1:])
		ranks, ids = ranks[:len(ranks)-1], ids[:len(ids)-1]
		if best < len(ranks) {
			pair(best)
		}
		if best > 0 {
			pair(best - 1)
		}
	}
	return append(dst, syms...)
}

// heapEntry is a candidate merge of the symbol at pos with its right
// neighbour.
type heapEntry struct {
	rank, id    int32
	pos         int32
	left, right int32 // the pair it merges
}

func (a heapEntry) less(b heapEntry) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

type mergeHeap []heapEntry

func (h *mergeHeap) push(e heapEntry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() heapEntry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		c := l
		if r := l + 1; r < len(s) && s[r].less(s[l]) {
			c = r
		}
		if !s[c].less(s[i]) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
	return top
}

// heapScratch is the working memory of mergeHeap, reused through a pool.
type heapScratch struct {
	nodes []heapNode
	heap  mergeHeap
}

// heapNode is a symbol in mergeHeap's linked list; prev is -2 once the
// symbol has been merged into its left neighbour.
type heapNode struct {
	sym, prev, next int32
}

var heapPool = sync.Pool{New: func() any { return new(heapScratch) }}

// mergeHeap is the O(n log n) form of mergeSmall for long words (a long
// whitespace run is one word): symbols in a linked list, candidate merges
// in a heap ordered by (rank, position), stale entries skipped on pop.
func (m *bpe) mergeHeap(dst []int32, w string) []int32 {
	sc := heapPool.Get().(*heapScratch)
	defer heapPool.Put(sc)
	n := len(w)
	nodes := slices.Grow(sc.nodes[:0], n)[:n]
	h := sc.heap[:0]
	for i := 0; i < n; i++ {
		nodes[i] = heapNode{sym: m.byteIDs[w[i]], prev: int32(i - 1), next: int32(i + 1)}
	}
	nodes[n-1].next = -1
	for i := 0; i < n-1; i++ {
		if mg, ok := m.merges.get(pairKey(nodes[i].sym, nodes[i+1].sym)); ok {
			h.push(heapEntry{mg.rank, mg.id, int32(i), nodes[i].sym, nodes[i+1].sym})
		}
	}
	for len(h) > 0 {
		e := h.pop()
		p := e.pos
		np := &nodes[p]
		if np.prev == -2 || np.next < 0 {
			continue
		}
		q := np.next
		// The entry is stale unless the pair is still the one it was made
		// for.
		if np.sym != e.left || nodes[q].sym != e.right {
			continue
		}
		np.sym = e.id
		np.next = nodes[q].next
		nodes[q].prev = -2
		if np.next >= 0 {
			nodes[np.next].prev = p
		}
		if pp := np.prev; pp >= 0 {
			if mg, ok := m.merges.get(pairKey(nodes[pp].sym, np.sym)); ok {
				h.push(heapEntry{mg.rank, mg.id, pp, nodes[pp].sym, np.sym})
			}
		}
		if nn := np.next; nn >= 0 {
			if mg, ok := m.merges.get(pairKey(np.sym, nodes[nn].sym)); ok {
				h.push(heapEntry{mg.rank, mg.id, p, np.sym, nodes[nn].sym})
			}
		}
	}
	for i := int32(0); i >= 0; i = nodes[i].next {
		dst = append(dst, nodes[i].sym)
	}
	if cap(nodes) <= 1<<16 {
		sc.nodes, sc.heap = nodes, h
	} else {
		sc.nodes, sc.heap = nil, nil
	}
	return dst
}

// mergeTable is an open-addressing hash table from a pair of ids to its
// merge: the merge lookup is the inner loop of BPE, and this is about
// twice as fast as a Go map for it.
type mergeTable struct {
	// low holds the merges of two ids below 256 (in GPT-2 style
	// vocabularies, the byte tokens), which start every word and would
	// otherwise miss the cache.
	low []merge // [256*256], rank -1 where there is none
	// filter has a bit set for the hash of every pair with a merge. Most
	// lookups find no merge; this small bitmap answers them without
	// touching the big table.
	filter []uint64
	slots  []mergeSlot
	shift  uint // 64 - log2(len(slots))
	n      int
}

type mergeSlot struct {
	key uint64 // emptyKey when free
	merge
}

const emptyKey = ^uint64(0) // ids are below maxTokens, so no pair is this

func newMergeTable(capacity int) mergeTable {
	size, bits := 8, uint(3)
	for size < capacity+capacity/2 {
		size, bits = size*2, bits+1
	}
	t := mergeTable{
		low:    make([]merge, 256*256),
		filter: make([]uint64, filterBits/64),
		slots:  make([]mergeSlot, size),
		shift:  64 - bits,
	}
	for i := range t.slots {
		t.slots[i].key = emptyKey
	}
	for i := range t.low {
		t.low[i].rank = -1
	}
	return t
}

func (t *mergeTable) index(key uint64) uint64 {
	return (key * 0x9E3779B97F4A7C15) >> t.shift
}

// filterBits is the size of the filter: 512 KiB, a few percent false
// positives at 150k merges.
const filterBits = 1 << 22

func filterIndex(key uint64) uint64 {
	return (key * 0xC2B2AE3D27D4EB4F) >> (64 - 22)
}

func (t *mergeTable) get(key uint64) (merge, bool) {
	if key&^0xFF000000FF == 0 {
		m := t.low[key>>24|key&0xFF]
		return m, m.rank >= 0
	}
	if f := filterIndex(key); t.filter[f/64]&(1<<(f%64)) == 0 {
		return merge{}, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			return s.merge, true
		}
		if s.key == emptyKey {
			return merge{}, false
		}
	}
}

// put inserts or replaces; the table never fills past two thirds.
func (t *mergeTable) put(key uint64, m merge) {
	if key&^0xFF000000FF == 0 {
		t.low[key>>24|key&0xFF] = m
		return
	}
	f := filterIndex(key)
	t.filter[f/64] |= 1 << (f % 64)
	mask := uint64(len(t.slots) - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			s.merge = m
			return
		}
		if s.key == emptyKey {
			s.key, s.merge = key, m
			t.n++
			return
		}
	}
}

// wordCache remembers the tokens of recent words. It is safe for
// concurrent use; a full shard is simply emptied.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 16
	cacheShardCap = 8192
	cacheMaxWord  = 64 // longer words are not cached
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int32)
	}
	return c
}

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%cacheShards]
}

func (c *wordCache) get(w string) ([]int32, bool) {
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	s := c.shard(w)
	s.mu.Lock()
	if len(s.m) >= cacheShardCap {
		clear(s.m)
	}
	s.m[w] = ids
	s.mu.Unlock()
}
