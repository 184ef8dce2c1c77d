// Package kvcache keeps the book of a paged KV cache: a fixed number of
// pages of PageSize token positions each (sized from the maximum total
// tokens), a free list, per-sequence-slot page tables and a reference
// count per page. It holds no tensors: the backend owns the K/V storage,
// indexed by the page ids this package hands out, so the same bookkeeping
// serves every backend.
//
// A page may be shared: a prefix cache (package kvcache/radix) holds a
// reference on the pages it keeps, and a slot that starts with a cached
// prefix holds references on the same pages (Attach). A page returns to
// the free list when its last reference goes; a page some slot holds is
// never reused.
package kvcache

import (
	"fmt"

	"github.com/ktserve/kt/model"
)

// Pool allocates KV pages to sequence slots. It is not safe for concurrent
// use (the engine's scheduler goroutine owns the runner that owns it).
type Pool struct {
	pageSize int
	numPages int
	free     []int32   // stack of free page ids
	pages    [][]int32 // per slot, pages in position order
	length   []int     // per slot, tokens cached
	refs     []int32   // per page, references (slots and the cache)
	cached   []bool    // per page, held by the cache (Retain)
	idle     int       // cached pages no slot holds (refs == 1)
	reclaim  func(pages int)
}

// New makes a pool able to hold maxTokens token positions in pages of
// pageSize, shared by maxSlots sequence slots.
func New(maxTokens, pageSize, maxSlots int) (*Pool, error) {
	if pageSize <= 0 || maxTokens <= 0 || maxSlots <= 0 {
		return nil, fmt.Errorf("kvcache: need positive max tokens (%d), page size (%d) and slots (%d)", maxTokens, pageSize, maxSlots)
	}
	n := (maxTokens + pageSize - 1) / pageSize
	if n > 1<<30 {
		return nil, fmt.Errorf("kvcache: %d pages is too many", n)
	}
	p := &Pool{
		pageSize: pageSize,
		numPages: n,
		free:     make([]int32, n),
		pages:    make([][]int32, maxSlots),
		length:   make([]int, maxSlots),
		refs:     make([]int32, n),
		cached:   make([]bool, n),
	}
	for i := range p.free {
		// pop order 0,1,2,... for readable tables
		p.free[i] = int32(n - 1 - i)
	}
	return p, nil
}

// PageSize is the number of token positions per page.
func (p *Pool) PageSize() int { return p.pageSize }

// NumPages is the total number of pages.
func (p *Pool) NumPages() int { return p.numPages }

// MaxSlots is the number of sequence slots.
func (p *Pool) MaxSlots() int { return len(p.pages) }

// FreeTokens is the number of token positions in free pages, counting the
// cache's pages that no slot holds when a reclaim hook is installed (a
// Reserve then reclaims them).
func (p *Pool) FreeTokens() int {
	if p.reclaim == nil {
		return len(p.free) * p.pageSize
	}
	return (len(p.free) + p.idle) * p.pageSize
}

// FreePages is the number of pages on the free list.
func (p *Pool) FreePages() int { return len(p.free) }

// IdleCachedPages is the number of pages the cache holds that no slot
// holds: what a reclaim can free.
func (p *Pool) IdleCachedPages() int { return p.idle }

// SetReclaim installs the function Reserve calls when the free list is
// short by n pages: it should release (Release) up to n idle cached pages.
func (p *Pool) SetReclaim(f func(n int)) { p.reclaim = f }

// ref adds a reference to page.
func (p *Pool) ref(page int32) {
	p.refs[page]++
	if p.cached[page] && p.refs[page] == 2 {
		p.idle--
	}
}

// unref drops a reference to page, freeing it with the last one.
func (p *Pool) unref(page int32) {
	p.refs[page]--
	switch {
	case p.refs[page] == 0:
		p.cached[page] = false
		p.free = append(p.free, page)
	case p.cached[page] && p.refs[page] == 1:
		p.idle++
	}
}

// Retain makes the cache a holder of page, which must be in use by a slot
// and not already retained.
func (p *Pool) Retain(page int32) error {
	if page < 0 || int(page) >= p.numPages || p.refs[page] == 0 || p.cached[page] {
		return fmt.Errorf("kvcache: retaining page %d, which is not a slot's uncached page", page)
	}
	p.cached[page] = true
	p.refs[page]++
	return nil
}

// Release drops the cache's hold on page (from Retain); the page is freed
// unless a slot holds it.
func (p *Pool) Release(page int32) {
	if page < 0 || int(page) >= p.numPages || !p.cached[page] {
		return
	}
	if p.refs[page] == 1 {
		p.idle--
	}
	p.cached[page] = false
	p.unref(page)
}

// Refs is the number of holders of page (slots and the cache).
func (p *Pool) Refs(page int32) int { return int(p.refs[page]) }

// Attach starts the empty slot with the given pages, full of tokens, as
// its first len(pages)·PageSize positions: the slot holds a reference on
// each, so they stay while it runs. The pages' KV must be the slot's
// sequence's (a cached prefix).
func (p *Pool) Attach(slot int, pages []int32) error {
	if err := p.checkSlot(slot); err != nil {
		return err
	}
	if len(p.pages[slot]) != 0 || p.length[slot] != 0 {
		return fmt.Errorf("kvcache: attaching a prefix to slot %d, which is not empty", slot)
	}
	for _, pg := range pages {
		if pg < 0 || int(pg) >= p.numPages || p.refs[pg] == 0 {
			return fmt.Errorf("kvcache: attaching page %d, which is not in use", pg)
		}
	}
	for _, pg := range pages {
		p.ref(pg)
		p.pages[slot] = append(p.pages[slot], pg)
	}
	p.length[slot] = len(pages) * p.pageSize
	return nil
}

func (p *Pool) checkSlot(slot int) error {
	if slot < 0 || slot >= len(p.pages) {
		return fmt.Errorf("kvcache: slot %d outside [0,%d)", slot, len(p.pages))
	}
	return nil
}

// Reserve makes the slot's pages cover n more tokens beyond its cached
// length. It reserves nothing and returns an error wrapping
// model.ErrOutOfMemory when the free pages do not suffice.
func (p *Pool) Reserve(slot, n int) error {
	if err := p.checkSlot(slot); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("kvcache: reserve %d tokens in slot %d", n, slot)
	}
	need := (p.length[slot]+n+p.pageSize-1)/p.pageSize - len(p.pages[slot])
	if need <= 0 {
		return nil
	}
	if need > len(p.free) && p.reclaim != nil && need <= len(p.free)+p.idle {
		p.reclaim(need - len(p.free))
	}
	if need > len(p.free) {
		return fmt.Errorf("kvcache: slot %d needs %d more pages (%d tokens), %d free: %w", slot, need, n, len(p.free), model.ErrOutOfMemory)
	}
	for i := 0; i < need; i++ {
		last := len(p.free) - 1
		pg := p.free[last]
		p.free = p.free[:last]
		p.refs[pg] = 1
		p.pages[slot] = append(p.pages[slot], pg)
	}
	return nil
}

// Capacity is the number of token positions the slot's pages cover.
func (p *Pool) Capacity(slot int) int { return len(p.pages[slot]) * p.pageSize }

// Len is the number of tokens cached in the slot.
func (p *Pool) Len(slot int) int { return p.length[slot] }

// Pages returns the slot's page table (aliases internal state; valid until
// the next Reserve or Free of that slot).
func (p *Pool) Pages(slot int) []int32 { return p.pages[slot] }

// Advance records that n more tokens were written to the slot. It fails if
// they exceed the reserved capacity.
func (p *Pool) Advance(slot, n int) error {
	if err := p.checkSlot(slot); err != nil {
		return err
	}
	if n < 0 || p.length[slot]+n > p.Capacity(slot) {
		return fmt.Errorf("kvcache: slot %d advancing %d tokens from %d exceeds its reserved %d", slot, n, p.length[slot], p.Capacity(slot))
	}
	p.length[slot] += n
	return nil
}

// Free drops the slot's hold on all of its pages (those no one else
// holds return to the free list) and resets its length to 0.
func (p *Pool) Free(slot int) {
	if p.checkSlot(slot) != nil {
		return
	}
	// return in reverse so a re-reserve gets the same ids back
	for i := len(p.pages[slot]) - 1; i >= 0; i-- {
		p.unref(p.pages[slot][i])
	}
	p.pages[slot] = p.pages[slot][:0]
	p.length[slot] = 0
}
