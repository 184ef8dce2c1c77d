//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
	"github.com/ktserve/kt/tp"
)

// SameDeviceGroup is a tp.Group of several ranks on one GPU, each rank a
// backend with its own stream on the same Device: the tensor-parallel
// partitioning tested on one GPU, with the collectives as kernels instead
// of NCCL. At each collective the ranks' host threads meet (tp.Barrier) to
// read each other's buffer addresses (device addresses of one device); each
// rank's stream then runs a GPU barrier (m_tp_barrier: every rank's work
// before the collective done), its share of the work over every rank's
// buffer, and a second GPU barrier (every rank's share done), and the host
// threads meet again before the next collective may publish new buffers.
// The streams meet on the GPU, so a rank's collectives can be recorded in
// its CUDA graphs and replayed with no host between them, as NCCL's are;
// the ranks must then take the same path (graph or op by op) in a step,
// which AllAgree settles. For tests.
type SameDeviceGroup struct {
	bar   *tp.Barrier
	ranks []*sameRank
	// count holds each rank's GPU barrier counter (device memory); abort
	// is a word of pinned host memory that, set, releases every rank
	// waiting in a GPU barrier (Abort).
	count Buffer
	abort *HostBuffer
	stop  uint64 // abort's device address, m_tp_barrier's argument
}

var _ tp.Group = (*SameDeviceGroup)(nil)

// maxSameDeviceRanks is the most ranks m_tp_sum takes.
const maxSameDeviceRanks = 8

// sameDeviceTimeout is how long a GPU barrier waits for a rank that does
// not come before it traps (a hung host thread).
const sameDeviceTimeout = 60 * time.Second

// NewSameDeviceGroup makes the group of bes, rank r on bes[r]; every
// backend must be on the same Device.
func NewSameDeviceGroup(bes []*Backend) (*SameDeviceGroup, error) {
	if len(bes) == 0 || len(bes) > maxSameDeviceRanks {
		return nil, fmt.Errorf("cuda: a same-device group of %d ranks (1 to %d)", len(bes), maxSameDeviceRanks)
	}
	g := &SameDeviceGroup{bar: tp.NewBarrier(len(bes))}
	for r, b := range bes {
		if b == nil || b.d == nil || b.d != bes[0].d {
			return nil, fmt.Errorf("cuda: same-device group: rank %d is not on rank 0's device", r)
		}
		g.ranks = append(g.ranks, &sameRank{g: g, rank: r, b: b})
	}
	d := bes[0].d
	if err := d.kern.loadAll(); err != nil {
		return nil, fmt.Errorf("cuda: same-device group: %w", err)
	}
	var err error
	if g.count, err = d.Alloc(4*maxSameDeviceRanks, "tp barrier counters"); err != nil {
		return nil, err
	}
	if g.abort, err = d.AllocHost(4096); err == nil {
		g.stop, err = g.abort.DevicePtr()
	}
	if err == nil {
		err = g.zero()
	}
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// zero sets every GPU barrier counter and the abort word to 0, once every
// rank's stream is idle.
func (g *SameDeviceGroup) zero() error {
	for _, r := range g.ranks {
		if err := r.b.Sync(); err != nil {
			return err
		}
	}
	s := g.ranks[0].b.s
	if err := s.Memset(g.count, 0); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	HostSlice[uint32](g.abort)[0] = 0
	return nil
}

// Size implements tp.Group.
func (g *SameDeviceGroup) Size() int { return len(g.ranks) }

// Comm implements tp.Group.
func (g *SameDeviceGroup) Comm(rank int) tp.Comm { return g.ranks[rank] }

// Abort implements tp.Group: the host meetings fail, and the abort word
// releases the ranks' streams from their GPU barriers.
func (g *SameDeviceGroup) Abort(err error) {
	atomic.StoreUint32(&HostSlice[uint32](g.abort)[0], 1)
	g.bar.Abort(err)
}

// Reset implements tp.Group: once the ranks' streams are idle the counters
// start again from 0 (an aborted step left them apart).
func (g *SameDeviceGroup) Reset() {
	if err := g.zero(); err != nil {
		for _, r := range g.ranks {
			r.fail(fmt.Errorf("reset: %w", err))
		}
	}
	g.bar.Reset()
}

// Close implements tp.Group.
func (g *SameDeviceGroup) Close() error {
	var errs []error
	if len(g.ranks) > 0 && g.count.Size > 0 {
		g.ranks[0].b.d.Free(g.count)
	}
	if g.abort != nil {
		errs = append(errs, g.abort.Free())
	}
	g.ranks = nil
	return errors.Join(errs...)
}

// sameRank is one rank of a SameDeviceGroup.
type sameRank struct {
	g    *SameDeviceGroup
	rank int
	b    *Backend
	err  error
	// the collective's arguments, read by the other ranks between the two
	// meetings
	x, out *Tensor
	w, ow  int
	agree  bool // AllAgree's argument
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

// enter publishes the rank's tensors and meets the others on the host;
// its stream then waits on the GPU for every rank's prior work
// (m_tp_barrier). It returns false (with the failure recorded) when the
// collective cannot go on: every rank sees the same published arguments,
// so all of them then skip the GPU work alike and only meet again in
// leave. A rank whose own arguments are wrong (or that failed before)
// still meets the others, which then fail too, so that no rank waits for
// it.
func (c *sameRank) enter(x, out backend.Tensor, n int, op string) bool {
	c.x, c.out = nil, nil
	if c.err != nil {
		// a rank with a failure still meets the others (without a tensor)
	} else if err := c.args(x, out, n, op); err != nil {
		c.fail(err)
		c.x = nil
	}
	if err := c.g.bar.Wait(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
		return false
	}
	for _, o := range c.g.ranks {
		if o.x == nil || (op != "AllGatherCols" && o.w != c.w) {
			c.fail(fmt.Errorf("%s: rank %d passed no usable tensor or another width", op, o.rank))
			c.meet(op)
			return false
		}
	}
	if err := c.gpuBarrier(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
	}
	return true
}

// gpuBarrier queues m_tp_barrier on the rank's stream.
func (c *sameRank) gpuBarrier() error {
	g := c.g
	return c.b.d.launch(c.b.s, "m_tp_barrier", grid1(1), grid1(1), 0, g.count, g.stop, c.rank, c.Size(), uint64(sameDeviceTimeout))
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

// leave queues the second GPU barrier (every rank's share done before any
// rank's stream goes on) and meets the others on the host, after which
// they may publish the next collective's tensors.
func (c *sameRank) leave(op string) {
	if err := c.gpuBarrier(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
	}
	c.meet(op)
}

// meet is the host meeting that ends a collective.
func (c *sameRank) meet(op string) {
	if err := c.g.bar.Wait(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
	}
}

// AllAgree reports, to every rank, whether every rank passed ok: the ranks
// meet on the host. The graph path calls it so that all ranks replay,
// capture or run op by op together (their GPU barriers pair up in order).
func (c *sameRank) AllAgree(ok bool) bool {
	c.agree = ok
	if err := c.g.bar.Wait(); err != nil {
		c.fail(fmt.Errorf("AllAgree: %w", err))
		return false
	}
	all := true
	for _, o := range c.g.ranks {
		all = all && o.agree
	}
	c.meet("AllAgree")
	return all
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
