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
