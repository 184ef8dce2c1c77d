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
	mu    sync.Mutex
	cond  *sync.Cond
	gen   uint64 // barrier generation
	count int    // ranks arrived at the current barrier
	abort error
	slots []localSlot
	comms []*localComm
}

// localSlot is what a rank hands a collective: its rows and width, and
// for AllGatherCols its output rows and width.
type localSlot struct {
	x, out []float32
	w, ow  int
}

// NewLocal makes a Local group of n ranks.
func NewLocal(n int) (*Local, error) {
	if n < 1 {
		return nil, fmt.Errorf("tp: %d ranks", n)
	}
	g := &Local{n: n, slots: make([]localSlot, n)}
	g.cond = sync.NewCond(&g.mu)
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
func (g *Local) Abort(err error) {
	if err == nil {
		err = errors.New("aborted")
	}
	g.mu.Lock()
	if g.abort == nil {
		g.abort = fmt.Errorf("tp: another rank failed: %w", err)
	}
	g.cond.Broadcast()
	g.mu.Unlock()
}

// Reset implements Group.
func (g *Local) Reset() {
	g.mu.Lock()
	g.abort, g.count = nil, 0
	g.gen++
	g.mu.Unlock()
}

// Close implements Group.
func (g *Local) Close() error { return nil }

// barrier waits until every rank arrives, or fails after Abort.
func (g *Local) barrier() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abort != nil {
		return g.abort
	}
	gen := g.gen
	if g.count++; g.count == g.n {
		g.count = 0
		g.gen++
		g.cond.Broadcast()
		return nil
	}
	for gen == g.gen && g.abort == nil {
		g.cond.Wait()
	}
	if gen == g.gen {
		return g.abort
	}
	return nil
}

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
// Every rank sees the same slots, so a mismatch fails every rank alike.
func (c *localComm) enter(s localSlot, op string) bool {
	if c.err != nil {
		return false
	}
	c.g.slots[c.rank] = s
	if err := c.g.barrier(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
		return false
	}
	s0 := c.g.slots[0]
	for r, o := range c.g.slots {
		if len(o.x) != len(s0.x) && op != "AllGatherCols" {
			c.fail(fmt.Errorf("%s: rank %d passed %d elements, rank 0 %d", op, r, len(o.x), len(s0.x)))
			return false
		}
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
	if c.err != nil {
		return
	}
	d, _, err := rows(x, n, "AllReduce")
	if err != nil {
		c.fail(err)
		return
	}
	if !c.enter(localSlot{x: d}, "AllReduce") {
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
	if c.err != nil {
		return
	}
	d, _, err := rows(x, n, "Broadcast")
	if err != nil {
		c.fail(err)
		return
	}
	if !c.enter(localSlot{x: d}, "Broadcast") {
		return
	}
	if c.rank != 0 {
		copy(d, c.g.slots[0].x)
	}
	c.leave("Broadcast")
}

// AllGatherCols implements Comm.
func (c *localComm) AllGatherCols(out, x backend.Tensor, n int) {
	if c.err != nil {
		return
	}
	d, w, err := rows(x, n, "AllGatherCols x")
	if err != nil {
		c.fail(err)
		return
	}
	o, ow, err := rows(out, n, "AllGatherCols out")
	if err != nil {
		c.fail(err)
		return
	}
	if !c.enter(localSlot{x: d, w: w, out: o, ow: ow}, "AllGatherCols") {
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
