//go:build cgo

package cuda

import (
	"errors"
	"fmt"
)

// Device operations outside the op set: the hybrid step's copies between
// device and pinned host memory, its router-logit prediction, and the
// sampling kernel Backend.Pick launches.

const bf16Size = 2

// WordCopy is one copy of KernelCopy: N bytes, a multiple of 4, from device
// address Src to device address Dst (pinned host memory through
// HostBuffer.DevicePtr included).
type WordCopy struct {
	Dst, Src uint64
	N        int64
}

// KernelCopy queues up to three copies as one kernel (m_copy_words). For
// copies of a few KiB between the device and pinned host memory, such as
// the hybrid step's hand-off, a kernel costs 2-3.5 µs on the stream where a
// copy-engine transfer of 8 KiB costs 6-12 (BenchmarkHandOff).
func (d *Device) KernelCopy(s *Stream, cs ...WordCopy) error {
	if len(cs) > 3 {
		return fmt.Errorf("cuda: KernelCopy of %d copies: at most 3", len(cs))
	}
	var c [3]WordCopy
	total := int64(0)
	for i, x := range cs {
		if x.N < 0 || x.N%4 != 0 || (x.N > 0 && (x.Dst == 0 || x.Src == 0)) {
			return fmt.Errorf("cuda: KernelCopy %d: %d bytes from %#x to %#x (want a multiple of 4 between non-null addresses)", i, x.N, x.Src, x.Dst)
		}
		c[i] = x
		total += x.N / 4
	}
	if total == 0 {
		return nil
	}
	grid := min(blocks64(total, 256), int64(4*max(d.Info.SMs, 1)))
	return d.launch(s, "m_copy_words", grid1(int(grid)), grid1(256), 0,
		c[0].Dst, c[0].Src, c[0].N/4, c[1].Dst, c[1].Src, c[1].N/4, c[2].Dst, c[2].Src, c[2].N/4)
}

// RouteLogits queues out[t][e] = Σ_h w[e][h]·g[h]·x[t][h] for n rows of x
// (f32 [n][H]) and E experts (w: bf16 router weights [E][H], g: f32 norm
// weights [H]): the router's logits of the RMS-normed rows up to each row's
// positive 1/rms factor, which no top-k depends on, in one launch
// (kernels/predict.cu). out is a device address, a Buffer's or pinned host
// memory's (HostBuffer.DevicePtr) with n·E floats.
func (d *Device) RouteLogits(s *Stream, out uint64, x, g, w Buffer, n, E, H int) error {
	if n < 0 || E < 1 || H < 1 || out == 0 || x.Size < int64(n)*int64(H)*4 || g.Size < int64(H)*4 || w.Size < int64(E)*int64(H)*2 {
		return fmt.Errorf("cuda: RouteLogits of %d rows, %d experts, hidden %d: buffers of %d, %d and %d bytes", n, E, H, x.Size, g.Size, w.Size)
	}
	return d.launch(s, "m_route_logits", grid1(int(blocks64(int64(n)*int64(E)*32, 256))), grid1(256), 0, out, x, g, w, n, E, H)
}

// HostCopy is one transfer of CopyHost: N bytes between the device buffer
// Dev and the pinned buffer Host at offset HostOff.
type HostCopy struct {
	Host    *HostBuffer
	HostOff int64
	Dev     Buffer
	N       int64
}

// KernelCopyMax is the most bytes CopyHost moves by kernel; more take the
// copy engines. On the H100 machine a kernel moved 8 KiB in 3.5 µs
// against 8-10 for a copy-engine transfer, 256 KiB in 10 against 16, and 8
// MiB at the same ~41 GB/s out and 3 % slower back (BenchmarkHandOff).
const KernelCopyMax = 2 << 20

// CopyHost queues up to three transfers between device memory and pinned
// host memory, all to the host (toHost) or all from it: as one kernel over
// the pinned buffers' device addresses (KernelCopy) when they total at
// most KernelCopyMax bytes, else one copy-engine transfer each
// (Stream.CopyDtoH, Stream.CopyHtoD).
func (d *Device) CopyHost(s *Stream, toHost bool, cs ...HostCopy) error {
	total := int64(0)
	for _, c := range cs {
		total += c.N
	}
	if total > KernelCopyMax || len(cs) > 3 {
		var errs []error
		for _, c := range cs {
			if toHost {
				errs = append(errs, s.CopyDtoH(c.Host, c.HostOff, c.Dev, c.N))
			} else {
				errs = append(errs, s.CopyHtoD(c.Dev, c.Host, c.HostOff, c.N))
			}
		}
		return errors.Join(errs...)
	}
	var wc [3]WordCopy
	for i, c := range cs {
		if err := checkHostRange("CopyHost", c.Host, c.HostOff, c.Dev, c.N); err != nil {
			return err
		}
		hp, err := c.Host.DevicePtr()
		if err != nil {
			return err
		}
		wc[i] = WordCopy{Dst: hp + uint64(c.HostOff), Src: c.Dev.Ptr, N: c.N}
		if !toHost {
			wc[i].Dst, wc[i].Src = wc[i].Src, wc[i].Dst
		}
	}
	return d.KernelCopy(s, wc[:len(cs)]...)
}

// PickParams are one row's pick settings as m_pick reads them (32 bytes;
// putPicks writes them from a model.Draw): the zero value is greedy.
type PickParams struct {
	InvT float32 // float32(1 / temperature); 0: greedy
	TopK int32   // <= 0 or >= V: off
	MinP float32 // <= 0: off
	_    int32
	TopP float64 // >= 1: off
	U    float64 // the sequence's uniform value in [0, 1)
}

// pickGrid is the blocks m_pick is launched with per row (PICK_GRID in
// sample.cu): a cluster of 8 on sm_90 and later, one block (and seven that
// return at once) before.
const pickGrid = 8

// pickClusterRows is the most rows m_pick takes (8 blocks each, one wave
// of 128 SMs); more rows fill the GPU by themselves and go to m_pick_rows,
// one block each.
const pickClusterRows = 16

// launchPick launches the picks of rows rows with args (out, logits, V,
// params): m_pick with a cluster per row for up to pickClusterRows rows,
// m_pick_rows beyond, and from the first time a cluster launch fails on.
func (d *Device) launchPick(s *Stream, rows int, args ...any) error {
	if rows <= pickClusterRows && d.pickRowsOnly != nil && !d.pickRowsOnly.Load() {
		err := d.launch(s, "m_pick", grid1(rows*pickGrid), grid1(1024), 0, args...)
		if err == nil {
			return nil
		}
		d.pickRowsOnly.Store(true) // an error of another kind fails m_pick_rows too
	}
	return d.launch(s, "m_pick_rows", grid1(rows), grid1(1024), 0, args...)
}
