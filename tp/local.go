package tp

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ktserve/kt/backend"
)

// f32Tensor is a tensor whose data is host float32 (the CPU backend's
// activations).
type f32Tensor interface {
	backend.Tensor
	F32() []float32
}

// Local is a Group of ranks in one process whose tensors live in host
// memory (the CPU backend's F32 activations): each rank's goroutine calls
// its collectives, which meet at a barrier; the reduction is split over
// the ranks (rank r sums the r-th share of the elements for every rank),
// each element added in rank order, so every rank gets the same sum.
type Local struct {
	n     int
	bar   *Barrier
	slots []localSlot
	comms []*localComm
}

// localSlot is what a rank hands a collective: its rows and width, and
// for AllGatherCols its output rows and width.
type localSlot struct {
	x, out []float32
	w, ow  int
	bad    bool // the rank's arguments were wrong
}

// NewLocal makes a Local group of n ranks.
func NewLocal(n int) (*Local, error) {
	if n < 1 {
		return nil, fmt.Errorf("tp: %d ranks", n)
	}
	g := &Local{n: n, bar: NewBarrier(n), slots: make([]localSlot, n)}
	for r := 0; r < n; r++ {
		g.comms = append(g.comms, &localComm{g: g, rank: r})
	}
	return g, nil
}

// Size implements Group.
func (g *Local) Size() int { return g.n }

// Comm implements Group.
func (g *Local) Comm(rank int) Comm { return g.comms[rank] }

// Abort implements Group.
func (g *Local) Abort(err error) { g.bar.Abort(err) }

// Reset implements Group.
func (g *Local) Reset() { g.bar.Reset() }

// Close implements Group.
func (g *Local) Close() error { return nil }

// barrier waits until every rank arrives, or fails after Abort.
func (g *Local) barrier() error { return g.bar.Wait() }

// localComm is one rank's end of a Local group.
type localComm struct {
	g    *Local
	rank int
	err  error
}

func (c *localComm) Rank() int { return c.rank }
func (c *localComm) Size() int { return c.g.n }

func (c *localComm) Err() error {
	err := c.err
	c.err = nil
	return err
}

func (c *localComm) fail(err error) {
	if c.err == nil {
		c.err = fmt.Errorf("tp rank %d: %w", c.rank, err)
	}
}

// rows returns the first n rows of t and its width.
func rows(t backend.Tensor, n int, what string) ([]float32, int, error) {
	ft, ok := t.(f32Tensor)
	if !ok || ft.F32() == nil {
		return nil, 0, fmt.Errorf("%s: a local communicator needs host F32 tensors, got %T", what, t)
	}
	sh := t.Shape()
	w := 1
	if len(sh) > 0 {
		w = sh[len(sh)-1]
	}
	d := ft.F32()
	if n < 0 || n*w > len(d) {
		return nil, 0, fmt.Errorf("%s: %d rows of %d outside the tensor's %d elements", what, n, w, len(d))
	}
	return d[:n*w], w, nil
}

// enter hands the rank's slot over and waits for every rank; it returns
// false (with the failure recorded) when the collective cannot go on.
// Every rank sees the same slots, so a mismatch fails every rank alike; a
// rank whose own arguments were wrong (bad) still meets the others, which
// then fail too, so that no rank waits for it.
func (c *localComm) enter(s localSlot, bad bool, op string) bool {
	s.bad = bad
	c.g.slots[c.rank] = s
	if err := c.g.barrier(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
		return false
	}
	s0 := c.g.slots[0]
	for r, o := range c.g.slots {
		switch {
		case o.bad:
			c.fail(fmt.Errorf("%s: rank %d's arguments are wrong", op, r))
		case len(o.x) != len(s0.x) && op != "AllGatherCols":
			c.fail(fmt.Errorf("%s: rank %d passed %d elements, rank 0 %d", op, r, len(o.x), len(s0.x)))
		default:
			continue
		}
		c.leave(op)
		return false
	}
	return true
}

// leave waits until every rank is done reading the others' slots.
func (c *localComm) leave(op string) {
	if err := c.g.barrier(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
	}
}

// AllReduce implements Comm: rank r sums the r-th share of the elements
// over the ranks (in rank order) and writes the sum into every rank's rows.
func (c *localComm) AllReduce(x backend.Tensor, n int) {
	// a rank with a failure still meets the others (as a bad slot)
	failed := c.err != nil
	d, _, err := rows(x, n, "AllReduce")
	if err != nil {
		c.fail(err)
	}
	if !c.enter(localSlot{x: d}, failed || err != nil, "AllReduce") {
		return
	}
	g := c.g
	per := (len(d) + g.n - 1) / g.n
	lo, hi := min(c.rank*per, len(d)), min((c.rank+1)*per, len(d))
	for i := lo; i < hi; i++ {
		s := g.slots[0].x[i]
		for r := 1; r < g.n; r++ {
			s += g.slots[r].x[i]
		}
		for r := range g.n {
			g.slots[r].x[i] = s
		}
	}
	c.leave("AllReduce")
}

// Broadcast implements Comm.
func (c *localComm) Broadcast(x backend.Tensor, n int) {
	failed := c.err != nil
	d, _, err := rows(x, n, "Broadcast")
	if err != nil {
		c.fail(err)
	}
	if !c.enter(localSlot{x: d}, failed || err != nil, "Broadcast") {
		return
	}
	if c.rank != 0 {
		copy(d, c.g.slots[0].x)
	}
	c.leave("Broadcast")
}

// AllGatherCols implements Comm.
func (c *localComm) AllGatherCols(out, x backend.Tensor, n int) {
	failed := c.err != nil
	d, w, err := rows(x, n, "AllGatherCols x")
	o, ow, err2 := rows(out, n, "AllGatherCols out")
	if err = errors.Join(err, err2); err != nil {
		c.fail(err)
	}
	if !c.enter(localSlot{x: d, w: w, out: o, ow: ow}, failed || err != nil, "AllGatherCols") {
		return
	}
	sum := 0
	for _, s := range c.g.slots {
		sum += s.w
	}
	if sum != ow {
		c.fail(fmt.Errorf("AllGatherCols: the ranks' widths add up to %d, out is %d wide", sum, ow))
		c.leave("AllGatherCols")
		return
	}
	off := 0
	for _, s := range c.g.slots {
		for i := 0; i < n; i++ {
			copy(o[i*ow+off:i*ow+off+s.w], s.x[i*s.w:(i+1)*s.w])
		}
		off += s.w
	}
	c.leave("AllGatherCols")
}

// Barrier is where n goroutines (a group's ranks) meet: Wait returns once
// all n have called it, or with the error given to Abort, which wakes the
// waiting ones and fails every Wait until Reset.
type Barrier struct {
	n     int
	mu    sync.Mutex
	cond  *sync.Cond
	gen   uint64 // generation
	count int    // arrived at the current generation
	abort error
}

// NewBarrier makes a barrier of n goroutines.
func NewBarrier(n int) *Barrier {
	b := &Barrier{n: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Wait waits until every goroutine arrives, or fails after Abort.
func (b *Barrier) Wait() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.abort != nil {
		return b.abort
	}
	gen := b.gen
	if b.count++; b.count == b.n {
		b.count = 0
		b.gen++
		b.cond.Broadcast()
		return nil
	}
	for gen == b.gen && b.abort == nil {
		b.cond.Wait()
	}
	if gen == b.gen {
		return b.abort
	}
	return nil
}

// Abort fails the waiting and the later Waits with err until Reset.
func (b *Barrier) Abort(err error) {
	if err == nil {
		err = errors.New("aborted")
	}
	b.mu.Lock()
	if b.abort == nil {
		b.abort = fmt.Errorf("tp: another rank failed: %w", err)
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

// Reset ends an Abort once no goroutine waits.
func (b *Barrier) Reset() {
	b.mu.Lock()
	b.abort, b.count = nil, 0
	b.gen++
	b.mu.Unlock()
}
