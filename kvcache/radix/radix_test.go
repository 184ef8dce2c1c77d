package radix

import (
	"slices"
	"testing"

	"github.com/ktserve/kt/kvcache"
)

// fill reserves len(tokens) tokens in slot and returns its pages.
func fill(t *testing.T, p *kvcache.Pool, slot int, n int) []int32 {
	t.Helper()
	if err := p.Reserve(slot, n); err != nil {
		t.Fatal(err)
	}
	if err := p.Advance(slot, n); err != nil {
		t.Fatal(err)
	}
	return slices.Clone(p.Pages(slot))
}

func seqOf(n int, base int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = base + int32(i)
	}
	return s
}

func TestInsertMatchShareEvict(t *testing.T) {
	const ps = 4
	p, err := kvcache.New(10*ps, ps, 3)
	if err != nil {
		t.Fatal(err)
	}
	tr := New(p, nil)
	a := seqOf(10, 100) // 2 full pages + 2 tokens
	pa := fill(t, p, 0, len(a))
	if _, err := tr.Insert(0, a[:8], pa[:2], NoSnapshot); err != nil {
		t.Fatal(err)
	}
	p.Free(0)
	if got, want := p.FreeTokens(), 10*ps; got != want {
		t.Fatalf("free tokens after caching %d, want %d (cached pages count as free)", got, want)
	}
	if p.FreePages() != 8 || p.IdleCachedPages() != 2 {
		t.Fatalf("free %d idle %d, want 8 and 2", p.FreePages(), p.IdleCachedPages())
	}

	// a sequence that extends a shares both pages; one that diverges in
	// the second page shares only the first; the limit caps the match.
	b := append(slices.Clone(a), 7, 7, 7)
	if m := tr.Match(0, b, len(b)-1, false); m.Tokens != 8 || !slices.Equal(m.Pages, pa[:2]) {
		t.Fatalf("match %+v, want the 2 pages %v", m, pa[:2])
	}
	c := slices.Clone(a)
	c[5] = 9
	if m := tr.Match(0, c, len(c)-1, false); m.Tokens != 4 {
		t.Fatalf("diverging match %d tokens, want 4", m.Tokens)
	}
	if m := tr.Match(0, a[:8], 7, false); m.Tokens != 4 {
		t.Fatalf("limited match %d tokens, want 4", m.Tokens)
	}
	if m := tr.Match(1, a, 9, false); m.Tokens != 0 {
		t.Fatalf("another adapter matched %d tokens", m.Tokens)
	}
	// snapshot-only matching finds none
	if m := tr.Match(0, b, len(b)-1, true); m.Tokens != 0 || m.Snapshot != NoSnapshot {
		t.Fatalf("match without snapshots %+v", m)
	}

	// slot 1 attaches the prefix; its pages cannot be evicted.
	m := tr.Match(0, b, len(b)-1, false)
	if err := p.Attach(1, m.Pages); err != nil {
		t.Fatal(err)
	}
	if p.Len(1) != 8 || p.IdleCachedPages() != 0 {
		t.Fatalf("attached len %d idle %d", p.Len(1), p.IdleCachedPages())
	}
	if n := tr.Evict(5); n != 0 {
		t.Fatalf("evicted %d pages in use", n)
	}
	// fill the rest of the pool: the held pages survive
	if err := p.Reserve(2, 8*ps); err != nil {
		t.Fatal(err)
	}
	if err := p.Reserve(1, 1); err == nil {
		t.Fatal("reserve beyond the pool succeeded")
	}
	p.Free(2)
	p.Free(1)
	if p.IdleCachedPages() != 2 {
		t.Fatalf("idle %d after the slot let go, want 2", p.IdleCachedPages())
	}
	// a reserve that needs every page reclaims the cached ones
	if err := p.Reserve(2, 10*ps); err != nil {
		t.Fatalf("reserve with reclaim: %v", err)
	}
	if tr.Pages() != 0 {
		t.Fatalf("tree holds %d pages after reclaim", tr.Pages())
	}
	p.Free(2)
	if p.FreePages() != 10 {
		t.Fatalf("%d free pages, want 10", p.FreePages())
	}
}

func TestLRUAndSnapshots(t *testing.T) {
	const ps = 2
	p, _ := kvcache.New(8*ps, ps, 2)
	var dropped []int
	tr := New(p, func(id int) { dropped = append(dropped, id) })
	x, y := seqOf(4, 0), seqOf(4, 50)
	px := fill(t, p, 0, 4)
	if kept, err := tr.Insert(0, x, px, 7); err != nil || !kept {
		t.Fatalf("insert x: kept %v, %v", kept, err)
	}
	p.Free(0)
	py := fill(t, p, 0, 4)
	if _, err := tr.Insert(0, y, py, NoSnapshot); err != nil {
		t.Fatal(err)
	}
	p.Free(0)
	// x is older; touch x so y becomes the LRU one
	tr.Match(0, x, 4, false)
	if n := tr.Evict(2); n != 2 {
		t.Fatalf("evicted %d", n)
	}
	if m := tr.Match(0, y, 4, false); m.Tokens != 0 {
		t.Fatalf("y still cached (%d tokens); the LRU leaves should go first", m.Tokens)
	}
	if m := tr.Match(0, x, 4, true); m.Tokens != 4 || m.Snapshot != 7 {
		t.Fatalf("x with snapshot: %+v", m)
	}
	// a longer sequence over x: matching with needSnap stops at x's end
	z := append(slices.Clone(x), 9, 9, 9)
	if err := p.Attach(0, tr.Match(0, z, 6, false).Pages); err != nil {
		t.Fatal(err)
	}
	if err := p.Reserve(0, 3); err != nil {
		t.Fatal(err)
	}
	_ = p.Advance(0, 3)
	if _, err := tr.Insert(0, z[:6], p.Pages(0)[:3], NoSnapshot); err != nil {
		t.Fatal(err)
	}
	p.Free(0)
	if m := tr.Match(0, append(z, 1), 7, true); m.Tokens != 4 || m.Snapshot != 7 {
		t.Fatalf("needSnap match %+v, want x's 4 tokens and snapshot 7", m)
	}
	if m := tr.Match(0, append(z, 1), 7, false); m.Tokens != 6 {
		t.Fatalf("match %+v, want 6 tokens", m)
	}
	if !tr.DropSnapshot() || tr.DropSnapshot() {
		t.Fatal("DropSnapshot: want exactly one snapshot to drop")
	}
	tr.Flush()
	if tr.Pages() != 0 || tr.Snapshots() != 0 || p.FreePages() != 8 || !slices.Equal(dropped, []int{7}) {
		t.Fatalf("after flush: %d pages %d snaps %d free, dropped %v", tr.Pages(), tr.Snapshots(), p.FreePages(), dropped)
	}
}

// TestRandomOpsKeepInvariants drives a pool and its tree with random
// sequences (from a few shared prefixes) that reserve, write, end into the
// cache, match and get evicted, and checks after every operation that the
// page counts add up and that every matched page still holds the tokens
// it was written with (no cached page is ever reused while cached).
func TestRandomOpsKeepInvariants(t *testing.T) {
	const ps, pages, slots = 4, 24, 3
	p, _ := kvcache.New(pages*ps, ps, slots)
	tr := New(p, nil)
	content := make([][]int32, pages) // what each page was written with
	rng := uint32(1)
	rnd := func(n int) int {
		rng = rng*1664525 + 1013904223
		return int(rng>>8) % n
	}
	type run struct {
		tokens []int32
		live   bool
	}
	runs := make([]run, slots)
	evictions, hits, prev := 0, 0, 0
	check := func(step int) {
		if tr.Pages() < prev {
			evictions++
		}
		prev = tr.Pages()
		used := 0
		idle := 0
		for pg := int32(0); pg < pages; pg++ {
			if p.Refs(pg) > 0 {
				used++
			}
		}
		cachedPages := 0
		for _, r := range tr.roots {
			tr.walk(r, func(c *node) {
				cachedPages++
				if p.Refs(c.page) == 1 {
					idle++
				}
				if got := tr.key(content[c.page]); got != c.key {
					t.Fatalf("step %d: cached page %d was overwritten", step, c.page)
				}
			})
		}
		if used+p.FreePages() != pages || idle != p.IdleCachedPages() || cachedPages != tr.Pages() {
			t.Fatalf("step %d: used %d free %d (of %d), idle %d/%d, tree %d/%d", step, used, p.FreePages(), pages, idle, p.IdleCachedPages(), cachedPages, tr.Pages())
		}
	}
	for step := range 3000 {
		s := rnd(slots)
		r := &runs[s]
		switch {
		case !r.live:
			// start: a shared prefix (one of 3) and a random tail
			base := seqOf(8+4*rnd(3), int32(1000*rnd(3)))
			r.tokens = append(base, seqOf(1+rnd(10), int32(5000+rnd(1000)))...)
			m := tr.Match(0, r.tokens, len(r.tokens)-1, false)
			for i, pg := range m.Pages {
				if !slices.Equal(content[pg], r.tokens[i*ps:(i+1)*ps]) {
					t.Fatalf("step %d: matched page %d holds %v, want %v", step, pg, content[pg], r.tokens[i*ps:(i+1)*ps])
				}
			}
			if err := p.Attach(s, m.Pages); err != nil {
				t.Fatal(err)
			}
			if m.Tokens > 0 {
				hits++
			}
			r.live = true
		case rnd(4) > 0 && p.Len(s) < len(r.tokens):
			// compute a chunk: reserve and "write" it
			n := min(1+rnd(6), len(r.tokens)-p.Len(s))
			if err := p.Reserve(s, n); err != nil {
				continue // out of memory: try another slot
			}
			from := p.Len(s)
			_ = p.Advance(s, n)
			for pos := from; pos < from+n; pos++ {
				pg := p.Pages(s)[pos/ps]
				if pos%ps == 0 {
					if p.Refs(pg) != 1 {
						t.Fatalf("step %d: writing into page %d that has %d holders", step, pg, p.Refs(pg))
					}
					content[pg] = nil
				}
				content[pg] = append(content[pg], r.tokens[pos])
			}
		default:
			// end: cache the full pages, free the slot
			full := p.Len(s) / ps
			if _, err := tr.Insert(0, r.tokens[:full*ps], p.Pages(s)[:full], NoSnapshot); err != nil {
				t.Fatal(err)
			}
			p.Free(s)
			r.live = false
		}
		check(step)
	}
	if evictions == 0 || hits == 0 {
		t.Fatalf("%d evictions and %d hits: the run does not exercise the cache", evictions, hits)
	}
}

// TestDropSnapshotKeepsShared: DropSnapshot gives up the least recently
// used unshared snapshot before any shared one (a branch point), however
// old the shared one is; with only shared ones left, the least recently
// used of those.
func TestDropSnapshotKeepsShared(t *testing.T) {
	p, err := kvcache.New(16, 4, 4) // 4 pages of 4 tokens
	if err != nil {
		t.Fatal(err)
	}
	var dropped []int
	tr := New(p, func(id int) { dropped = append(dropped, id) })
	seqs := [][]int32{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}}
	for i, x := range seqs {
		if err := p.Reserve(0, 4); err != nil {
			t.Fatal(err)
		}
		_ = p.Advance(0, 4)
		if _, err := tr.Insert(0, x, p.Pages(0), 10+i); err != nil {
			t.Fatal(err)
		}
		p.Free(0)
	}
	tr.Share(0, seqs[0])                 // the oldest becomes a branch point
	tr.Share(0, []int32{42, 42, 42, 42}) // not cached: nothing happens
	for _, want := range [][]int{{11}, {11, 12}, {11, 12, 10}} {
		if !tr.DropSnapshot() || !slices.Equal(dropped, want) {
			t.Fatalf("dropped %v, want %v", dropped, want)
		}
	}
	if tr.DropSnapshot() || tr.Snapshots() != 0 {
		t.Fatalf("%d snapshots left", tr.Snapshots())
	}
}
