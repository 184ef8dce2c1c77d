//go:build cgo

package cuda

// #include <stdlib.h>
// #include "ktcuda.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
	"github.com/ktserve/kt/tp"
)

// NCCL data types and reduction ops (nccl.h's ncclDataType_t, ncclRedOp_t).
const (
	ncclFloat32  = 7
	ncclBfloat16 = 9
	ncclSum      = 0
)

// ncclType is the NCCL data type of activations of dtype dt.
func ncclType(dt tensor.DType) (int, error) {
	switch dt {
	case tensor.F32:
		return ncclFloat32, nil
	case tensor.BF16:
		return ncclBfloat16, nil
	}
	return 0, fmt.Errorf("no NCCL collective for %s activations", dt)
}

// ncclErr turns an ncclResult_t into an error naming the call.
func ncclErr(r C.int, call string) error {
	if r == 0 {
		return nil
	}
	if r == C.KT_NCCL_CTX_ERROR {
		return fmt.Errorf("nccl: %s: making the GPU's context current failed", call)
	}
	return fmt.Errorf("nccl: %s: %s (ncclResult %d)", call, C.GoString(C.kt_ncclGetErrorString(r)), int(r))
}

// NCCLGroup is the tensor-parallel communicators of several GPUs of this
// process (tp.Group), one rank per backend, made together by
// ncclCommInitAll. Each rank's collectives are queued on its backend's
// stream, from the OS thread that runs that rank (arch's rank workers).
// NVLink SHARP (NVLS) is off: NCCL_NVLS_ENABLE=0 is set before the
// communicators are made (multicast objects are not lent on every
// machine, and the all-reduces of one decode step are small).
type NCCLGroup struct {
	comms  []C.ncclComm_t
	ranks  []*ncclRank
	mu     sync.Mutex
	abort  error
	closed bool
}

var _ tp.Group = (*NCCLGroup)(nil)

// NewNCCLGroup makes the communicators of the backends' GPUs, rank r on
// bes[r]. Each backend must be on a different GPU.
func NewNCCLGroup(bes []*Backend) (*NCCLGroup, error) {
	devs, err := ncclDevices(bes)
	if err != nil {
		return nil, err
	}
	if e := LoadLibraries().Err["nccl"]; e != nil {
		return nil, fmt.Errorf("tensor parallelism over GPUs needs NCCL: %w", e)
	}
	if err := setNVLSOff(); err != nil {
		return nil, err
	}
	n := len(bes)
	g := &NCCLGroup{comms: make([]C.ncclComm_t, n)}
	cdevs := make([]C.int, n)
	for i, d := range devs {
		cdevs[i] = C.int(d)
	}
	if err := ncclErr(C.kt_ncclCommInitAll(&g.comms[0], C.int(n), &cdevs[0]), fmt.Sprintf("ncclCommInitAll(%d GPUs %v)", n, devs)); err != nil {
		return nil, err
	}
	for r, b := range bes {
		g.ranks = append(g.ranks, &ncclRank{g: g, rank: r, b: b})
	}
	return g, nil
}

// ncclDevices checks that bes are on distinct GPUs and returns their
// ordinals.
func ncclDevices(bes []*Backend) ([]int, error) {
	if len(bes) == 0 {
		return nil, errors.New("nccl: a group of no GPUs")
	}
	seen := map[int]bool{}
	var devs []int
	for r, b := range bes {
		if b == nil || b.d == nil {
			return nil, fmt.Errorf("nccl: rank %d has no backend", r)
		}
		o := b.d.Info.Ordinal
		if seen[o] {
			return nil, fmt.Errorf("nccl: GPU %d given to two ranks (NCCL needs one GPU per rank; several ranks on one GPU are SameDeviceGroup's)", o)
		}
		seen[o] = true
		devs = append(devs, o)
	}
	return devs, nil
}

// setNVLSOff sets NCCL_NVLS_ENABLE=0 for the NCCL library of this process
// unless the user set it (NCCL reads its environment when a communicator
// is made). os.Setenv sets the C environment too in a cgo program.
func setNVLSOff() error {
	if _, set := os.LookupEnv("NCCL_NVLS_ENABLE"); set {
		return nil
	}
	if err := os.Setenv("NCCL_NVLS_ENABLE", "0"); err != nil {
		return fmt.Errorf("nccl: setting NCCL_NVLS_ENABLE=0: %w", err)
	}
	return nil
}

// Size implements tp.Group.
func (g *NCCLGroup) Size() int { return len(g.ranks) }

// Comm implements tp.Group.
func (g *NCCLGroup) Comm(rank int) tp.Comm { return g.ranks[rank] }

// Abort implements tp.Group: the communicators are aborted (a rank's
// kernels waiting for a rank that failed return), and every later
// collective fails: on the GPU a step that failed midway ends the group,
// and the model must be loaded again.
func (g *NCCLGroup) Abort(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abort != nil || g.closed {
		return
	}
	g.abort = fmt.Errorf("nccl: communicators aborted after a rank failed: %w", err)
	for _, c := range g.comms {
		C.kt_ncclCommAbort(c)
	}
}

// Reset implements tp.Group: nothing comes back after Abort on the GPU.
func (g *NCCLGroup) Reset() {}

// Close implements tp.Group.
func (g *NCCLGroup) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	if g.abort != nil {
		return nil // aborted communicators are freed by the abort
	}
	var errs []error
	for r, c := range g.comms {
		errs = append(errs, ncclErr(C.kt_ncclCommDestroy(c), fmt.Sprintf("ncclCommDestroy(rank %d)", r)))
	}
	return errors.Join(errs...)
}

func (g *NCCLGroup) aborted() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errors.New("nccl: group closed")
	}
	return g.abort
}

// ncclRank is one rank's end of an NCCLGroup: its collectives are queued
// on its backend's stream.
type ncclRank struct {
	g    *NCCLGroup
	rank int
	b    *Backend
	err  error
	// AllGatherCols' buffers: this rank's columns padded to the widest
	// rank's, and every rank's
	send, recv Buffer
}

func (c *ncclRank) Rank() int { return c.rank }
func (c *ncclRank) Size() int { return len(c.g.ranks) }

func (c *ncclRank) Err() error {
	err := c.err
	c.err = nil
	return err
}

func (c *ncclRank) fail(err error) {
	if c.err == nil {
		c.err = fmt.Errorf("tp rank %d: %w", c.rank, err)
	}
}

// arg checks a collective's tensor: a CUDA tensor of this rank's backend
// with n rows; it returns the tensor, its width and its NCCL type.
func (c *ncclRank) arg(x backend.Tensor, n int, op string) (*Tensor, int, int, bool) {
	if c.err != nil {
		return nil, 0, 0, false
	}
	if err := c.g.aborted(); err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
		return nil, 0, 0, false
	}
	t, ok := x.(*Tensor)
	if !ok || t == nil {
		c.fail(fmt.Errorf("%s: not a cuda tensor", op))
		return nil, 0, 0, false
	}
	w := t.cols()
	if n < 0 || n*w > t.n {
		c.fail(fmt.Errorf("%s: %d rows of %d outside %s", op, n, w, t.label()))
		return nil, 0, 0, false
	}
	dt, err := ncclType(t.dt)
	if err != nil {
		c.fail(fmt.Errorf("%s: %w", op, err))
		return nil, 0, 0, false
	}
	return t, w, dt, true
}

// AllReduce implements tp.Comm: ncclAllReduce (sum) in place on the
// rank's stream.
func (c *ncclRank) AllReduce(x backend.Tensor, n int) {
	t, w, dt, ok := c.arg(x, n, "AllReduce")
	if !ok || n == 0 {
		return
	}
	b := c.b
	if err := ncclErr(C.kt_ncclAllReduce(b.d.ctx, C.CUdeviceptr(t.buf.Ptr), C.CUdeviceptr(t.buf.Ptr), C.size_t(n*w), C.int(dt), ncclSum, c.g.comms[c.rank], b.s.s), "ncclAllReduce"); err != nil {
		c.fail(err)
	}
}

// Broadcast implements tp.Comm: ncclBroadcast from rank 0, in place.
func (c *ncclRank) Broadcast(x backend.Tensor, n int) {
	t, w, dt, ok := c.arg(x, n, "Broadcast")
	if !ok || n == 0 {
		return
	}
	b := c.b
	if err := ncclErr(C.kt_ncclBroadcast(b.d.ctx, C.CUdeviceptr(t.buf.Ptr), C.CUdeviceptr(t.buf.Ptr), C.size_t(n*w), C.int(dt), 0, c.g.comms[c.rank], b.s.s), "ncclBroadcast"); err != nil {
		c.fail(err)
	}
}

// AllGatherCols implements tp.Comm: the rank's columns are copied into a
// buffer padded to the widest rank's (tp.GatherWidths), gathered with
// ncclAllGather (rank-major), and each rank's part copied to its columns
// of out (m_copy_cols).
func (c *ncclRank) AllGatherCols(out, x backend.Tensor, n int) {
	t, w, dt, ok := c.arg(x, n, "AllGatherCols x")
	if !ok {
		return
	}
	o, W, _, ok := c.arg(out, n, "AllGatherCols out")
	if !ok || n == 0 {
		return
	}
	widths := tp.GatherWidths(W, c.Size())
	if w != widths[c.rank] {
		c.fail(fmt.Errorf("AllGatherCols: rank %d's x is %d wide, want %d of out's %d", c.rank, w, widths[c.rank], W))
		return
	}
	if t.dt != tensor.F32 || o.dt != tensor.F32 {
		c.fail(errors.New("AllGatherCols: F32 activations only"))
		return
	}
	wmax := widths[0]
	b := c.b
	need := int64(n) * int64(wmax) * 4
	if c.send.Size < need {
		if err := c.grow(need); err != nil {
			c.fail(err)
			return
		}
	}
	if err := b.d.launch(b.s, "m_copy_cols", grid1(n), grid1(min(256, max(32, w))), 0, c.send, wmax, 0, t.buf, w, w); err != nil {
		c.fail(fmt.Errorf("AllGatherCols: %w", err))
		return
	}
	if err := ncclErr(C.kt_ncclAllGather(b.d.ctx, C.CUdeviceptr(c.send.Ptr), C.CUdeviceptr(c.recv.Ptr), C.size_t(n*wmax), C.int(dt), c.g.comms[c.rank], b.s.s), "ncclAllGather"); err != nil {
		c.fail(err)
		return
	}
	off := 0
	for j, wj := range widths {
		src := c.recv
		src.Ptr += uint64(j) * uint64(n) * uint64(wmax) * 4
		if err := b.d.launch(b.s, "m_copy_cols", grid1(n), grid1(min(256, max(32, wj))), 0, o.buf, W, off, src, wmax, wj); err != nil {
			c.fail(fmt.Errorf("AllGatherCols: %w", err))
			return
		}
		off += wj
	}
}

// grow replaces the gather buffers with ones of need bytes per rank; a
// graph that recorded the old ones must not be replayed (GraphEpoch).
func (c *ncclRank) grow(need int64) error {
	d := c.b.d
	c.b.epoch++
	for _, buf := range []*Buffer{&c.send, &c.recv} {
		if buf.Size > 0 {
			d.Free(*buf)
			*buf = Buffer{}
		}
	}
	var err error
	if c.send, err = d.Alloc(need, "tp gather send"); err != nil {
		return err
	}
	c.recv, err = d.Alloc(need*int64(c.Size()), "tp gather recv")
	return err
}

// PeerAccess reports whether GPU a can read GPU b's memory directly
// (cuDeviceCanAccessPeer): NVLink or PCIe peer-to-peer, which NCCL uses
// between the GPUs of one process.
func PeerAccess(a, b int) (bool, error) {
	if err := initDriver(); err != nil {
		return false, err
	}
	var da, db C.CUdevice
	if err := cuErr(C.kt_cuDeviceGet(&da, C.int(a)), "cuDeviceGet(%d)", a); err != nil {
		return false, err
	}
	if err := cuErr(C.kt_cuDeviceGet(&db, C.int(b)), "cuDeviceGet(%d)", b); err != nil {
		return false, err
	}
	var v C.int
	if err := cuErr(C.kt_cuDeviceCanAccessPeer(&v, da, db), "cuDeviceCanAccessPeer(%d, %d)", a, b); err != nil {
		return false, err
	}
	return v != 0, nil
}
