// Package kvcache keeps the book of a paged KV cache: a fixed number of
// pages of PageSize token positions each (sized from the maximum total
// tokens), a free list, and per-sequence-slot page tables. It holds no
// tensors: the backend owns the K/V storage, indexed by the page ids this
// package hands out, so the same bookkeeping serves every backend.
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

// FreeTokens is the number of token positions in free pages.
func (p *Pool) FreeTokens() int { return len(p.free) * p.pageSize }

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
	if need > len(p.free) {
		return fmt.Errorf("kvcache: slot %d needs %d more pages (%d tokens), %d free: %w", slot, need, n, len(p.free), model.ErrOutOfMemory)
	}
	for i := 0; i < need; i++ {
		last := len(p.free) - 1
		p.pages[slot] = append(p.pages[slot], p.free[last])
		p.free = p.free[:last]
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

// Free returns all of the slot's pages and resets its length to 0.
func (p *Pool) Free(slot int) {
	if p.checkSlot(slot) != nil {
		return
	}
	// return in reverse so a re-reserve gets the same ids back
	for i := len(p.pages[slot]) - 1; i >= 0; i-- {
		p.free = append(p.free, p.pages[slot][i])
	}
	p.pages[slot] = p.pages[slot][:0]
	p.length[slot] = 0
}
