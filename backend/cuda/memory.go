//go:build cgo

package cuda

/*
#include "ktcuda.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

func (d *Device) memAlloc(n int64) (uint64, error) {
	var p C.CUdeviceptr
	if err := cuErr(C.kt_cuMemAlloc(d.ctx, &p, C.size_t(n)), "cuMemAlloc(%d bytes)", n); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

func (d *Device) memFree(p uint64) error {
	return cuErr(C.kt_cuMemFree(d.ctx, C.CUdeviceptr(p)), "cuMemFree")
}

// Alloc takes n bytes from the device's pool; what names it in errors.
func (d *Device) Alloc(n int64, what string) (Buffer, error) { return d.Pool.Alloc(n, what) }

// Free returns b to the pool.
func (d *Device) Free(b Buffer) { d.Pool.Free(b) }

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

func checkFit(op string, b Buffer, n int) error {
	if int64(n) > b.Size {
		return fmt.Errorf("cuda: %s: %d bytes do not fit a %d-byte buffer", op, n, b.Size)
	}
	return nil
}

// Upload copies src into dst synchronously.
func Upload[T any](d *Device, dst Buffer, src []T) error {
	b := bytesOf(src)
	if err := checkFit("upload", dst, len(b)); err != nil || len(b) == 0 {
		return err
	}
	return cuErr(C.kt_cuMemcpyHtoD(d.ctx, C.CUdeviceptr(dst.Ptr), unsafe.Pointer(&b[0]), C.size_t(len(b))), "cuMemcpyHtoD(%d bytes)", len(b))
}

// Download copies len(dst) elements from src synchronously, after all work
// already queued on any stream that writes src (the caller synchronises).
func Download[T any](d *Device, dst []T, src Buffer) error {
	b := bytesOf(dst)
	if err := checkFit("download", src, len(b)); err != nil || len(b) == 0 {
		return err
	}
	return cuErr(C.kt_cuMemcpyDtoH(d.ctx, unsafe.Pointer(&b[0]), C.CUdeviceptr(src.Ptr), C.size_t(len(b))), "cuMemcpyDtoH(%d bytes)", len(b))
}

// HostBuffer is page-locked host memory mapped for the device: copies from
// and to it run asynchronously, and its address never changes, so CUDA
// graphs and kernels may refer to it (the hybrid step's staging
// buffers).
type HostBuffer struct {
	d    *Device
	ptr  unsafe.Pointer
	dptr uint64 // its device address (mapped at allocation)
	Size int64
}

// AllocHost allocates n bytes of pinned host memory.
func (d *Device) AllocHost(n int64) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: pinned host allocation of %d bytes", n)
	}
	var p unsafe.Pointer
	// CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
	if err := cuErr(C.kt_cuMemHostAlloc(d.ctx, &p, C.size_t(n), 1|2), "cuMemHostAlloc(%d bytes)", n); err != nil {
		return nil, err
	}
	var dp C.CUdeviceptr
	if err := cuErr(C.kt_cuMemHostGetDevicePointer(d.ctx, &dp, p), "cuMemHostGetDevicePointer"); err != nil {
		C.kt_cuMemFreeHost(d.ctx, p)
		return nil, err
	}
	return &HostBuffer{d: d, ptr: p, dptr: uint64(dp), Size: n}, nil
}

// Bytes returns the buffer's memory as a byte slice (valid until Free).
func (h *HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.ptr), h.Size) }

// DevicePtr returns the device-side address of the mapped buffer.
func (h *HostBuffer) DevicePtr() (uint64, error) {
	if h.ptr == nil {
		return 0, fmt.Errorf("cuda: device address of a freed pinned buffer")
	}
	return h.dptr, nil
}

// Free releases the pinned memory.
func (h *HostBuffer) Free() error {
	if h.ptr == nil {
		return nil
	}
	err := cuErr(C.kt_cuMemFreeHost(h.d.ctx, h.ptr), "cuMemFreeHost")
	h.ptr = nil
	return err
}

// HostSlice views a pinned buffer as a slice of T.
func HostSlice[T any](h *HostBuffer) []T {
	var z T
	return unsafe.Slice((*T)(h.ptr), h.Size/int64(unsafe.Sizeof(z)))
}
