//go:build cgo

package cuda

/*
#include "ktcuda.h"
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

// Stream is a CUDA stream created non-blocking (it never synchronises with
// the legacy default stream).
type Stream struct {
	d         *Device
	s         C.CUstream
	capturing bool // between BeginCapture and EndCapture
}

// NewStream creates a stream.
func (d *Device) NewStream() (*Stream, error) {
	st := &Stream{d: d}
	// CU_STREAM_NON_BLOCKING
	if err := cuErr(C.kt_cuStreamCreate(d.ctx, &st.s, 1), "cuStreamCreate"); err != nil {
		return nil, err
	}
	return st, nil
}

// Destroy releases the stream after its queued work completes.
func (s *Stream) Destroy() error {
	if s.s == nil {
		return nil
	}
	err := cuErr(C.kt_cuStreamDestroy(s.d.ctx, s.s), "cuStreamDestroy")
	s.s = nil
	return err
}

// Synchronize waits for all work queued on s.
func (s *Stream) Synchronize() error {
	return cuErr(C.kt_cuStreamSynchronize(s.d.ctx, s.s), "cuStreamSynchronize")
}

// WaitHostTimeout is how long a WaitHost kernel waits for its value before
// it traps (the context fails: an error on every later call, not a hang).
const WaitHostTimeout = 60 * time.Second

// WaitHost makes future work on s wait until the uint32 at byte off of the
// pinned buffer h reaches v in cyclic order ((int32)(*addr - v) >= 0, so a
// counter may wrap), with a one-thread kernel that reads the word over the
// bus: the host lets work it queued ahead run by storing a value there,
// without a launch or a call on the stream. Any driver runs it, and the
// work behind starts about one bus read and one kernel boundary after the
// store. The kernel occupies one block while it waits; past
// WaitHostTimeout it traps. Make the first call while no stream waits on
// the host: it loads the kernel's module, which may wait for the work
// queued on the device.
func (s *Stream) WaitHost(h *HostBuffer, off int64, v uint32) error {
	dp, err := hostWord(h, off)
	if err != nil {
		return err
	}
	return s.d.launch(s, "m_wait_host", grid1(1), grid1(1), 0, dp, v, int64(WaitHostTimeout))
}

// hostWord is the device address of the uint32 at byte off of h.
func hostWord(h *HostBuffer, off int64) (uint64, error) {
	if off < 0 || off%4 != 0 || off+4 > h.Size {
		return 0, fmt.Errorf("cuda: stream wait on byte %d of a %d-byte pinned buffer", off, h.Size)
	}
	dp, err := h.DevicePtr()
	return dp + uint64(off), err
}

// Wait makes future work on s wait for e's last record.
func (s *Stream) Wait(e *Event) error {
	return cuErr(C.kt_cuStreamWaitEvent(s.d.ctx, s.s, e.e), "cuStreamWaitEvent")
}

// checkHostRange checks a transfer of n bytes between the pinned buffer h
// at offset off and the device buffer dev (op names it in the error).
func checkHostRange(op string, h *HostBuffer, off int64, dev Buffer, n int64) error {
	if off < 0 || n < 0 || off+n > h.Size || n > dev.Size {
		return fmt.Errorf("cuda: %s of %d bytes at %d: out of range (host %d, device %d)", op, n, off, h.Size, dev.Size)
	}
	return nil
}

// CopyHtoD queues a copy from pinned host memory to the device.
func (s *Stream) CopyHtoD(dst Buffer, src *HostBuffer, srcOff, n int64) error {
	if err := checkHostRange("CopyHtoD", src, srcOff, dst, n); err != nil {
		return err
	}
	return cuErr(C.kt_cuMemcpyHtoDAsync(s.d.ctx, C.CUdeviceptr(dst.Ptr), unsafe.Add(src.ptr, srcOff), C.size_t(n), s.s), "cuMemcpyHtoDAsync(%d bytes)", n)
}

// CopyDtoH queues a copy from the device to pinned host memory.
func (s *Stream) CopyDtoH(dst *HostBuffer, dstOff int64, src Buffer, n int64) error {
	if err := checkHostRange("CopyDtoH", dst, dstOff, src, n); err != nil {
		return err
	}
	return cuErr(C.kt_cuMemcpyDtoHAsync(s.d.ctx, unsafe.Add(dst.ptr, dstOff), C.CUdeviceptr(src.Ptr), C.size_t(n), s.s), "cuMemcpyDtoHAsync(%d bytes)", n)
}

// CopyDtoD queues a device-to-device copy of n bytes.
func (s *Stream) CopyDtoD(dst, src Buffer, n int64) error {
	if n < 0 || n > dst.Size || n > src.Size {
		return fmt.Errorf("cuda: CopyDtoD of %d bytes: out of range (dst %d, src %d)", n, dst.Size, src.Size)
	}
	return cuErr(C.kt_cuMemcpyDtoDAsync(s.d.ctx, C.CUdeviceptr(dst.Ptr), C.CUdeviceptr(src.Ptr), C.size_t(n), s.s), "cuMemcpyDtoDAsync(%d bytes)", n)
}

// Memset queues filling b with the byte v.
func (s *Stream) Memset(b Buffer, v byte) error {
	return cuErr(C.kt_cuMemsetD8Async(s.d.ctx, C.CUdeviceptr(b.Ptr), C.uchar(v), C.size_t(b.Size), s.s), "cuMemsetD8Async(%d bytes)", b.Size)
}

// Event marks a point in a stream.
type Event struct {
	d *Device
	e C.CUevent
}

// NewEvent creates an event; timing events record timestamps, others are
// lighter (CU_EVENT_DISABLE_TIMING).
func (d *Device) NewEvent(timing bool) (*Event, error) {
	ev := &Event{d: d}
	flags := C.uint(2) // CU_EVENT_DISABLE_TIMING
	if timing {
		flags = 0
	}
	if err := cuErr(C.kt_cuEventCreate(d.ctx, &ev.e, flags), "cuEventCreate"); err != nil {
		return nil, err
	}
	return ev, nil
}

// Record marks the current end of s's queue.
func (e *Event) Record(s *Stream) error {
	return cuErr(C.kt_cuEventRecord(e.d.ctx, e.e, s.s), "cuEventRecord")
}

// RecordExternal records e inside a stream capture as an event record
// node (CU_EVENT_RECORD_EXTERNAL): each launch of the graph records e when
// the work queued before it on s is done, so the host can wait for that
// point of the graph (Done, Synchronize) while the rest of it runs. It is
// an error outside a capture.
func (e *Event) RecordExternal(s *Stream) error {
	return cuErr(C.kt_cuEventRecordWithFlags(e.d.ctx, e.e, s.s, 1), "cuEventRecordWithFlags(external)")
}

// Synchronize waits until the recorded work is done.
func (e *Event) Synchronize() error {
	return cuErr(C.kt_cuEventSynchronize(e.d.ctx, e.e), "cuEventSynchronize")
}

// Done reports whether the recorded work is complete, without blocking.
func (e *Event) Done() (bool, error) {
	r := C.kt_cuEventQuery(e.d.ctx, e.e)
	if r == cuErrNotReady {
		return false, nil
	}
	return r == 0, cuErr(r, "cuEventQuery")
}

// Elapsed returns the milliseconds between start's record and e's record.
func (e *Event) Elapsed(start *Event) (float32, error) {
	var ms C.float
	if err := cuErr(C.kt_cuEventElapsedTime(e.d.ctx, &ms, start.e, e.e), "cuEventElapsedTime"); err != nil {
		return 0, err
	}
	return float32(ms), nil
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	if e.e == nil {
		return nil
	}
	err := cuErr(C.kt_cuEventDestroy(e.d.ctx, e.e), "cuEventDestroy")
	e.e = nil
	return err
}

// Graph is an instantiated CUDA graph captured from a stream.
type Graph struct {
	d *Device
	g C.CUgraph
	e C.CUgraphExec
}

// Capture records everything fn queues on s into a graph instead of running
// it, and instantiates the graph. Work fn queues must use fixed buffers:
// replays reuse the captured addresses and kernel arguments.
func (s *Stream) Capture(fn func() error) (*Graph, error) {
	if err := s.BeginCapture(); err != nil {
		return nil, err
	}
	return s.EndCapture(fn())
}

// BeginCapture starts recording what is queued on s (EndCapture ends it).
func (s *Stream) BeginCapture() error {
	// CU_STREAM_CAPTURE_MODE_RELAXED: other goroutines may allocate while
	// this one captures.
	if err := cuErr(C.kt_cuStreamBeginCapture(s.d.ctx, s.s, 2), "cuStreamBeginCapture"); err != nil {
		return err
	}
	s.capturing = true
	return nil
}

// Capturing reports whether a capture begun on s is recording: work that
// reads results back to the host (a synchronize) cannot be queued then.
func (s *Stream) Capturing() bool { return s.capturing }

// EndCapture ends the recording BeginCapture started and instantiates the
// graph; ferr, an error of the code that queued the work, discards it.
func (s *Stream) EndCapture(ferr error) (*Graph, error) {
	g := &Graph{d: s.d}
	s.capturing = false
	if err := cuErr(C.kt_cuStreamEndCapture(s.d.ctx, s.s, &g.g), "cuStreamEndCapture"); err != nil {
		if ferr != nil {
			return nil, fmt.Errorf("cuda: capture: %w (and %v)", ferr, err)
		}
		return nil, err
	}
	if ferr != nil {
		C.kt_cuGraphDestroy(s.d.ctx, g.g)
		return nil, fmt.Errorf("cuda: capture: %w", ferr)
	}
	if err := cuErr(C.kt_cuGraphInstantiate(s.d.ctx, &g.e, g.g), "cuGraphInstantiateWithFlags"); err != nil {
		C.kt_cuGraphDestroy(s.d.ctx, g.g)
		return nil, err
	}
	return g, nil
}

// Launch replays the graph on s.
func (g *Graph) Launch(s *Stream) error {
	return cuErr(C.kt_cuGraphLaunch(g.d.ctx, g.e, s.s), "cuGraphLaunch")
}

// Destroy releases the graph.
func (g *Graph) Destroy() error {
	var err error
	if g.e != nil {
		err = cuErr(C.kt_cuGraphExecDestroy(g.d.ctx, g.e), "cuGraphExecDestroy")
		g.e = nil
	}
	if g.g != nil {
		if e2 := cuErr(C.kt_cuGraphDestroy(g.d.ctx, g.g), "cuGraphDestroy"); err == nil {
			err = e2
		}
		g.g = nil
	}
	return err
}
