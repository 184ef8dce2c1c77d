package runbase

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/kvcache/radix"
)

// prefixState is the prefix cache of a runner (model.PrefixCache): the
// radix tree over the pool's pages and, for a model with linear-attention
// layers, its recurrent-state snapshots.
//
// A model with recurrent state can resume a cached prefix only where the
// state after it is known. After every step the state of each slot whose
// length lands on a page boundary is copied to that slot's rolling
// snapshot (one copy per PageSize tokens); when the sequence is cached,
// the rolling snapshot is copied into a kept one attached to the tree node
// of that boundary, and only the pages up to it are cached.
type prefixState struct {
	tree     *radix.Tree
	st       backend.LinearState // nil: no recurrent state
	rollBase int                 // state slot of slot 0's rolling snapshot
	rolled   []int               // per slot, tokens its rolling snapshot covers (0: none)
	snapFree []int               // free kept-snapshot state slots
}

// initPrefix makes the tree once the pool exists.
func (b *Base) initPrefix() {
	b.pfx.tree = radix.New(b.Pool, b.dropSnapshot)
}

// UsePrefixState gives the prefix cache the model's linear-attention
// state, allocated with StateSlots slots. Without a call (or with
// Opts.PrefixSnapshots 0) a model with recurrent state must not match
// prefixes: MatchPrefix then finds none.
func (b *Base) UsePrefixState(st backend.LinearState) {
	if st == nil {
		return
	}
	b.stateful = true
	if b.Opts.PrefixSnapshots <= 0 {
		return
	}
	p := &b.pfx
	p.st = st
	p.rollBase = b.seqStateSlots()
	p.rolled = make([]int, b.Opts.MaxSeqs)
	for i := b.Opts.PrefixSnapshots - 1; i >= 0; i-- {
		p.snapFree = append(p.snapFree, p.rollBase+b.Opts.MaxSeqs+i)
	}
}

// statefulNoSnapshots reports a model with recurrent state whose prefix
// cache keeps no snapshots: it reuses nothing.
func (b *Base) statefulNoSnapshots() bool { return b.stateful && b.pfx.st == nil }

func (b *Base) dropSnapshot(id int) {
	p := &b.pfx
	if p.st == nil {
		return
	}
	p.st.Free(id)
	p.snapFree = append(p.snapFree, id)
}

// rollSnapshots copies the state of each of the step's slots that ended on
// a page boundary to its rolling snapshot.
func (b *Base) rollSnapshots(slots []int) error {
	p := &b.pfx
	if p.st == nil {
		return nil
	}
	for _, slot := range slots {
		n := b.Pool.Len(slot)
		if n == 0 || n%b.Pool.PageSize() != 0 || n == p.rolled[slot] {
			continue
		}
		if err := p.st.CopySlot(p.rollBase+slot, slot); err != nil {
			return fmt.Errorf("%s: prefix cache: %w", b.Name, err)
		}
		p.rolled[slot] = n
	}
	return nil
}

// MatchPrefix implements model.PrefixCache: the empty slot starts with
// the longest cached prefix of tokens, at most len(tokens)-1 tokens (the
// last token's logits must be computed), and its state snapshot when the
// model has recurrent state.
func (b *Base) MatchPrefix(slot, adapter int, tokens []int32) (int, error) {
	n, _, err := b.MatchPrefixBranch(slot, adapter, tokens)
	return n, err
}

// MatchPrefixBranch implements model.PrefixBrancher: MatchPrefix, and for
// a model with recurrent state the end of the tree's pages along tokens
// where it lies beyond the deepest snapshot on that path (where the
// prompt leaves a prefix other sequences computed without keeping their
// state there).
func (b *Base) MatchPrefixBranch(slot, adapter int, tokens []int32) (int, int, error) {
	if b.statefulNoSnapshots() || len(tokens) < 2 {
		return 0, 0, nil
	}
	p := &b.pfx
	m := p.tree.Match(adapter, tokens, len(tokens)-1, p.st != nil)
	branch := 0
	if m.Path > m.Tokens { // only with recurrent state: a match without needSnap takes the whole path
		branch = m.Path
	}
	if m.Tokens == 0 {
		return 0, branch, nil
	}
	if err := b.Pool.Attach(slot, m.Pages); err != nil {
		return 0, 0, fmt.Errorf("%s: prefix cache: %w", b.Name, err)
	}
	if p.st != nil {
		if err := p.st.CopySlot(slot, m.Snapshot); err != nil {
			b.Pool.Free(slot)
			return 0, 0, fmt.Errorf("%s: prefix cache: restoring the state snapshot: %w", b.Name, err)
		}
		if err := p.st.CopySlot(p.rollBase+slot, m.Snapshot); err != nil {
			b.Pool.Free(slot)
			return 0, 0, fmt.Errorf("%s: prefix cache: restoring the state snapshot: %w", b.Name, err)
		}
		p.rolled[slot] = m.Tokens
	}
	return m.Tokens, branch, nil
}

// CachePrefix implements model.PrefixCache: the slot's full pages of
// tokens (its first Len tokens) go into the tree; with recurrent state,
// with a kept copy of its rolling snapshot on the page it covers (the
// pages past it stay as a path without a state). A running
// slot may call it too (the engine does at a branch point, right after the
// step that ended there); its pages stay its own as well.
func (b *Base) CachePrefix(slot, adapter int, tokens []int32) error {
	if b.statefulNoSnapshots() {
		return nil
	}
	if slot < 0 || slot >= b.Opts.MaxSeqs {
		return fmt.Errorf("%s: prefix cache: slot %d outside [0,%d)", b.Name, slot, b.Opts.MaxSeqs)
	}
	p, ps := &b.pfx, b.Pool.PageSize()
	n := min(len(tokens), b.Pool.Len(slot)) / ps * ps
	if n == 0 {
		return nil
	}
	pages := b.Pool.Pages(slot)
	at := n // where the state snapshot goes (with recurrent state: the rolling one's position)
	if p.st != nil {
		at = min(n, p.rolled[slot])
		if at < n {
			// the pages past the snapshot: no sequence resumes inside
			// them, but a later prompt that shares them and then leaves
			// them finds its branch point there (MatchPrefixBranch)
			if _, err := p.tree.Insert(adapter, tokens[:n], pages[:n/ps], radix.NoSnapshot); err != nil {
				return fmt.Errorf("%s: prefix cache: %w", b.Name, err)
			}
		}
		if at == 0 {
			return nil
		}
	}
	snap := radix.NoSnapshot
	if p.st != nil {
		if m := p.tree.Match(adapter, tokens[:at], at, true); m.Tokens < at {
			if len(p.snapFree) == 0 {
				p.tree.DropSnapshot()
			}
			if len(p.snapFree) == 0 {
				return nil // every snapshot is in use by a match being set up; keep nothing more
			}
			snap = p.snapFree[len(p.snapFree)-1]
			p.snapFree = p.snapFree[:len(p.snapFree)-1]
			if err := p.st.CopySlot(snap, p.rollBase+slot); err != nil {
				p.snapFree = append(p.snapFree, snap)
				return fmt.Errorf("%s: prefix cache: keeping the state snapshot: %w", b.Name, err)
			}
		} // else the same state is kept already
	}
	kept, err := p.tree.Insert(adapter, tokens[:at], pages[:at/ps], snap)
	if err != nil {
		return fmt.Errorf("%s: prefix cache: %w", b.Name, err)
	}
	if !kept && snap != radix.NoSnapshot {
		b.dropSnapshot(snap)
	}
	return nil
}

// CacheBranch implements model.PrefixBrancher: CachePrefix, with the
// snapshot it keeps at the end of tokens' whole pages marked shared, so
// that it outlives the snapshots kept at sequences' ends.
func (b *Base) CacheBranch(slot, adapter int, tokens []int32) error {
	if err := b.CachePrefix(slot, adapter, tokens); err != nil {
		return err
	}
	if b.pfx.st != nil {
		b.pfx.tree.Share(adapter, tokens[:len(tokens)/b.Pool.PageSize()*b.Pool.PageSize()])
	}
	return nil
}

// FlushPrefixCache implements model.PrefixCache.
func (b *Base) FlushPrefixCache() { b.pfx.tree.Flush() }

// CachedPrefixTokens implements model.PrefixCache.
func (b *Base) CachedPrefixTokens() int { return b.pfx.tree.Pages() * b.Pool.PageSize() }

// Prefix, embedded in a model's Runner, gives it the model.PrefixCache
// methods of its Base.
type Prefix struct{ b *Base }

// NewPrefix returns the prefix-cache methods of b for embedding.
func NewPrefix(b *Base) Prefix { return Prefix{b} }

// MatchPrefix implements model.PrefixCache.
func (p Prefix) MatchPrefix(slot, adapter int, tokens []int32) (int, error) {
	return p.b.MatchPrefix(slot, adapter, tokens)
}

// MatchPrefixBranch implements model.PrefixBrancher.
func (p Prefix) MatchPrefixBranch(slot, adapter int, tokens []int32) (int, int, error) {
	return p.b.MatchPrefixBranch(slot, adapter, tokens)
}

// CacheBranch implements model.PrefixBrancher.
func (p Prefix) CacheBranch(slot, adapter int, tokens []int32) error {
	return p.b.CacheBranch(slot, adapter, tokens)
}

// CachePrefix implements model.PrefixCache.
func (p Prefix) CachePrefix(slot, adapter int, tokens []int32) error {
	return p.b.CachePrefix(slot, adapter, tokens)
}

// FlushPrefixCache implements model.PrefixCache.
func (p Prefix) FlushPrefixCache() { p.b.FlushPrefixCache() }

// CachedPrefixTokens implements model.PrefixCache.
func (p Prefix) CachedPrefixTokens() int { return p.b.CachedPrefixTokens() }
