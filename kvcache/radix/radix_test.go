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
