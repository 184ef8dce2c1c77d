package kvcache

import (
	"errors"
	"testing"

	"github.com/ktserve/kt/model"
)

func TestReserveAdvanceFree(t *testing.T) {
	p, err := New(64, 16, 3)
	if err != nil {
		t.Fatal(err)
	}
	if p.NumPages() != 4 || p.FreeTokens() != 64 {
		t.Fatalf("pages %d free %d", p.NumPages(), p.FreeTokens())
	}
	if err := p.Reserve(0, 17); err != nil {
		t.Fatal(err)
	}
	if got := len(p.Pages(0)); got != 2 {
		t.Fatalf("slot 0 has %d pages, want 2", got)
	}
	if err := p.Advance(0, 17); err != nil {
		t.Fatal(err)
	}
	// 15 more fit in the second page: no new page
	if err := p.Reserve(0, 15); err != nil {
		t.Fatal(err)
	}
	if got := len(p.Pages(0)); got != 2 {
		t.Fatalf("slot 0 has %d pages after in-page reserve, want 2", got)
	}
	if err := p.Reserve(1, 33); !errors.Is(err, model.ErrOutOfMemory) {
		t.Fatalf("over-reserve: got %v, want ErrOutOfMemory", err)
	}
	if p.FreeTokens() != 32 || len(p.Pages(1)) != 0 {
		t.Fatalf("failed reserve changed state: free %d pages %v", p.FreeTokens(), p.Pages(1))
	}
	if err := p.Advance(0, 16); err == nil {
		t.Fatal("advance past capacity succeeded")
	}
	seen := map[int32]bool{}
	if err := p.Reserve(1, 32); err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{0, 1} {
		for _, pg := range p.Pages(s) {
			if seen[pg] {
				t.Fatalf("page %d handed out twice", pg)
			}
			seen[pg] = true
		}
	}
	p.Free(0)
	if p.Len(0) != 0 || p.FreeTokens() != 32 {
		t.Fatalf("after free: len %d free %d", p.Len(0), p.FreeTokens())
	}
}

func TestBadArgs(t *testing.T) {
	for _, c := range []struct{ tok, ps, slots int }{{0, 16, 1}, {16, 0, 1}, {16, 16, 0}} {
		if _, err := New(c.tok, c.ps, c.slots); err == nil {
			t.Errorf("New(%d,%d,%d) succeeded", c.tok, c.ps, c.slots)
		}
	}
	p, _ := New(16, 16, 1)
	if err := p.Reserve(1, 1); err == nil {
		t.Error("reserve in slot out of range succeeded")
	}
	if err := p.Reserve(0, -1); err == nil {
		t.Error("negative reserve succeeded")
	}
	p.Free(5) // no panic
}

func TestSharedPagesAndRefusals(t *testing.T) {
	p, err := New(8*4, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Reserve(0, 8); err != nil {
		t.Fatal(err)
	}
	_ = p.Advance(0, 8)
	pages := append([]int32(nil), p.Pages(0)...)
	for _, pg := range pages {
		if err := p.Retain(pg); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		what string
		err  error
	}{
		{"retain twice", p.Retain(pages[0])},
		{"retain a free page", p.Retain(5)},
		{"retain out of range", p.Retain(99)},
		{"attach to a non-empty slot", p.Attach(0, pages)},
		{"attach a free page", p.Attach(1, []int32{6})},
		{"attach to a bad slot", p.Attach(7, pages)},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.what)
		}
	}
	if err := p.Attach(1, pages); err != nil {
		t.Fatal(err)
	}
	if p.Len(1) != 8 || p.Refs(pages[0]) != 3 {
		t.Fatalf("attached: len %d refs %d, want 8 and 3", p.Len(1), p.Refs(pages[0]))
	}
	p.Free(0)
	p.Free(1)
	if p.IdleCachedPages() != 2 || p.FreePages() != 6 || p.FreeTokens() != 24 {
		t.Fatalf("idle %d free %d tokens %d, want 2, 6, 24 (no reclaim hook)", p.IdleCachedPages(), p.FreePages(), p.FreeTokens())
	}
	// without a reclaim hook the idle pages are not taken
	if err := p.Reserve(2, 32); err == nil {
		t.Fatal("reserved cached pages with no reclaim hook")
	}
	p.Release(pages[0])
	p.Release(pages[1])
	p.Release(pages[1]) // not held: nothing
	if p.FreePages() != 8 || p.IdleCachedPages() != 0 {
		t.Fatalf("after release: free %d idle %d", p.FreePages(), p.IdleCachedPages())
	}
}
