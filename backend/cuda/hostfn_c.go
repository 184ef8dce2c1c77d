//go:build cgo

package cuda

/*
#include "ktcuda.h"
*/
import "C"

import (
	"errors"
	"unsafe"
)

// LaunchHostFuncC queues the C function fn, of type void(void*), with
// argument arg on s (cuLaunchHostFunc). Unlike LaunchHostFunc no Go runs on
// the driver's callback thread, and the call can be captured into a graph:
// every replay runs fn(arg) again at the same point of the stream. fn must
// not call CUDA; arg must be C memory that stays valid (and unmoved) for as
// long as a stream or graph can run it.
func (s *Stream) LaunchHostFuncC(fn, arg unsafe.Pointer) error {
	if fn == nil {
		return errors.New("cuda: LaunchHostFuncC: nil function")
	}
	return cuErr(C.kt_launch_host_cfn(s.d.ctx, s.s, (*[0]byte)(fn), arg), "cuLaunchHostFunc(C)")
}

// Ptr returns the buffer's fixed host address, for C code that keeps it
// (a host function's argument).
func (h *HostBuffer) Ptr() unsafe.Pointer { return h.ptr }
