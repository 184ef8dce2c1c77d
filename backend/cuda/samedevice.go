//go:build cgo

package cuda

import (
	"errors"
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
	"github.com/ktserve/kt/tp"
)

// SameDeviceGroup is a tp.Group of several ranks on one GPU, each rank a
// backend with its own stream on the same Device: the tensor-parallel
// partitioning tested on one GPU, with the collectives as kernels instead
// of NCCL. At each collective every rank records an event on its stream and
// meets the others on the host (tp.Barrier); each stream then waits for
// every rank's event, runs its share of the work over every rank's buffer
// (device addresses of one device), records a second event, and after a
// second meeting waits for all of those before its next op. For tests: the
// host meets twice per collective.
type SameDeviceGroup struct {
	bar   *tp.Barrier
	ranks []*sameRank
}

var _ tp.Group = (*SameDeviceGroup)(nil)

// maxSameDeviceRanks is the most ranks m_tp_sum takes.
const maxSameDeviceRanks = 8

// NewSameDeviceGroup makes the group of bes, rank r on bes[r]; every
// backend must be on the same Device.
func NewSameDeviceGroup(bes []*Backend) (*SameDeviceGroup, error) {
	if len(bes) == 0 || len(bes) > maxSameDeviceRanks {
		return nil, fmt.Errorf("cuda: a same-device group of %d ranks (1 to %d)", len(bes), maxSameDeviceRanks)
	}
	g := &SameDeviceGroup{bar: tp.NewBarrier(len(bes))}
	for r, b := range bes {
		if b == nil || b.d == nil || b.d != bes[0].d {
			g.Close()
			return nil, fmt.Errorf("cuda: same-device group: rank %d is not on rank 0's device", r)
		}
		pre, err := b.d.NewEvent(false)
		if err != nil {
			g.Close()
			return nil, err
		}
		post, err := b.d.NewEvent(false)
		if err != nil {
			pre.Destroy()
			g.Close()
			return nil, err
		}
		g.ranks = append(g.ranks, &sameRank{g: g, rank: r, b: b, pre: pre, post: post})
	}
	return g, nil
}

// Size implements tp.Group.
func (g *SameDeviceGroup) Size() int { return len(g.ranks) }

// Comm implements tp.Group.
func (g *SameDeviceGroup) Comm(rank int) tp.Comm { return g.ranks[rank] }

// Abort implements tp.Group.
func (g *SameDeviceGroup) Abort(err error) { g.bar.Abort(err) }

// Reset implements tp.Group.
func (g *SameDeviceGroup) Reset() { g.bar.Reset() }

// Close implements tp.Group.
func (g *SameDeviceGroup) Close() error {
	var errs []error
	for _, r := range g.ranks {
		errs = append(errs, r.pre.Destroy(), r.post.Destroy())
	}
	g.ranks = nil
	return errors.Join(errs...)
}

// sameRank is one rank of a SameDeviceGroup.
type sameRank struct {
	g         *SameDeviceGroup
	rank      int
	b         *Backend
	pre, post *Event
	err       error
	// the collective's arguments, read by the other ranks between the two
	// meetings
	x, out *Tensor
	w, ow  int
}

func (c *sameRank) Rank() int { return c.rank }
func (c *sameRank) Size() int { return len(c.g.ranks) }

func (c *sameRank) Err() error {
	err := c.err
	c.err = nil
	return err
}

func (c *sameRank) fail(err error) {
	if c.err == nil {
		c.err = fmt.Errorf("tp rank %d: %w", c.rank, err)
	}
}

// enter publishes the rank's tensors, records its event and meets the
// others; its stream then waits for every rank's prior work. It returns
// false (with the failure recorded) when the collective cannot go on; a
// rank whose own arguments are wrong (or that failed before) still meets
// the others, which then fail too, so that no rank waits for it.
func (c *sameRank) enter(x, out backend.Tensor, n int, op string) bool {
	c.x, c.out = nil, nil
	if c.err != nil {
		// a rank with a failure still meets the others (without a tensor)
	} else if err := c.args(x, out, n, op); err != nil {
		c.fail(err)
		c.x = nil
	} else if err := c.pre.Record(c.b.s); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
		c.x = nil
	}
	if err := c.g.bar.Wait(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
		return false
	}
	for _, o := range c.g.ranks {
		if o.x == nil || (op != "AllGatherCols" && o.w != c.w) {
			c.fail(fmt.Errorf("%s: rank %d passed no usable tensor or another width", op, o.rank))
			c.leave(op)
			return false
		}
	}
	for _, o := range c.g.ranks {
		if err := c.b.s.Wait(o.pre); err != nil {
			c.fail(fmt.Errorf("%s: %w", op, err))
			c.leave(op)
			return false
		}
	}
	return true
}

// args checks and keeps a collective's tensors: F32 cuda tensors with n
// rows.
func (c *sameRank) args(x, out backend.Tensor, n int, op string) error {
	xt, ok := x.(*Tensor)
	if !ok || xt == nil || xt.dt != tensor.F32 {
		return fmt.Errorf("%s: want an F32 cuda tensor", op)
	}
	if c.w = xt.cols(); n < 0 || n*c.w > xt.n {
		return fmt.Errorf("%s: %d rows outside %s", op, n, xt.label())
	}
	if out != nil {
		ot, ok := out.(*Tensor)
		if !ok || ot == nil || ot.dt != tensor.F32 || n*ot.cols() > ot.n {
			return fmt.Errorf("%s: out: want an F32 cuda tensor of %d rows", op, n)
		}
		c.out, c.ow = ot, ot.cols()
	}
	c.x = xt
	return nil
}

// leave records the rank's second event, meets the others and makes its
// stream wait for every rank's share of the collective.
func (c *sameRank) leave(op string) {
	if err := c.post.Record(c.b.s); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
	}
	if err := c.g.bar.Wait(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
		return
	}
	for _, o := range c.g.ranks {
		if err := c.b.s.Wait(o.post); err != nil {
			c.fail(fmt.Errorf("%s: %w", op, err))
			return
		}
	}
}

// AllReduce implements tp.Comm: rank r sums the r-th share of the
// elements over every rank's buffer (m_tp_sum, ranks in order) and writes
// the sum into all of them.
func (c *sameRank) AllReduce(x backend.Tensor, n int) {
	if !c.enter(x, nil, n, "AllReduce") {
		return
	}
	total := int64(n) * int64(c.w)
	per := (total + int64(c.Size()) - 1) / int64(c.Size())
	lo, hi := min(int64(c.rank)*per, total), min(int64(c.rank+1)*per, total)
	if hi > lo {
		var p [maxSameDeviceRanks]uint64
		for j, o := range c.g.ranks {
			p[j] = o.x.buf.Ptr
		}
		if err := c.b.d.launch(c.b.s, "m_tp_sum", grid1(int(min(blocks64(hi-lo, 256), 1024))), grid1(256), 0,
			p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], c.Size(), lo, hi); err != nil {
			c.fail(fmt.Errorf("AllReduce: %w", err))
		}
	}
	c.leave("AllReduce")
}

// Broadcast implements tp.Comm: every rank but 0 copies rank 0's rows.
func (c *sameRank) Broadcast(x backend.Tensor, n int) {
	if !c.enter(x, nil, n, "Broadcast") {
		return
	}
	if c.rank != 0 && n > 0 {
		src := c.g.ranks[0].x
		if err := c.b.d.launch(c.b.s, "m_copy_cols", grid1(n), grid1(min(256, max(32, c.w))), 0, c.x.buf, c.w, 0, src.buf, c.w, c.w); err != nil {
			c.fail(fmt.Errorf("Broadcast: %w", err))
		}
	}
	c.leave("Broadcast")
}

// AllGatherCols implements tp.Comm: each rank copies every rank's columns
// into its own out.
func (c *sameRank) AllGatherCols(out, x backend.Tensor, n int) {
	if !c.enter(x, out, n, "AllGatherCols") {
		return
	}
	off := 0
	for _, o := range c.g.ranks {
		off += o.w
	}
	if off != c.ow {
		c.fail(fmt.Errorf("AllGatherCols: the ranks' widths add up to %d, out is %d wide", off, c.ow))
		c.leave("AllGatherCols")
		return
	}
	off = 0
	for _, o := range c.g.ranks {
		if n > 0 {
			if err := c.b.d.launch(c.b.s, "m_copy_cols", grid1(n), grid1(min(256, max(32, o.w))), 0, c.out.buf, c.ow, off, o.x.buf, o.w, o.w); err != nil {
				c.fail(fmt.Errorf("AllGatherCols: %w", err))
				break
			}
		}
		off += o.w
	}
	c.leave("AllGatherCols")
}
