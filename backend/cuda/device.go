//go:build cgo

package cuda

/*
#include <stdlib.h>
#include "ktcuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ktserve/kt/internal/settings"
)

// Device attribute numbers (CUdevice_attribute in cuda.h).
const (
	attrMultiprocessorCount    = 16
	attrL2CacheSize            = 38
	attrComputeCapMajor        = 75
	attrComputeCapMinor        = 76
	attrMaxSharedPerBlockOptin = 97
)

// Info describes one GPU as the driver reports it.
type Info struct {
	Ordinal        int    // index among the devices visible to this process
	Name           string // e.g. "NVIDIA H100 80GB HBM3"
	Major, Minor   int    // compute capability
	SMs            int    // multiprocessors
	TotalMem       int64  // bytes
	FreeMem        int64  // bytes free when probed
	L2Bytes        int
	MaxSharedOptin int    // bytes of shared memory a block may opt into
	PCIBusID       string // e.g. "0000:3B:00.0"
	PCIeLink       string // "Gen5 x16" from sysfs, or "" when not exposed
	DriverVersion  int    // CUDA version the driver supports, e.g. 13000
	DriverRelease  string // kernel-module version, e.g. "580.159.04", or ""
}

var (
	initOnce sync.Once
	initErr  error
)

// initDriver loads the libraries and calls cuInit once per process.
func initDriver() error {
	initOnce.Do(func() {
		l := LoadLibraries()
		if e := l.Err["driver"]; e != nil {
			initErr = fmt.Errorf("%w: %v", ErrUnavailable, e)
			return
		}
		if err := cuErr(C.kt_cuInit(), "cuInit"); err != nil {
			initErr = fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	})
	return initErr
}

// DeviceCount returns the number of GPUs visible to this process
// (CUDA_VISIBLE_DEVICES is applied by the driver itself).
func DeviceCount() (int, error) {
	if err := initDriver(); err != nil {
		return 0, err
	}
	var n C.int
	if err := cuErr(C.kt_cuDeviceGetCount(&n), "cuDeviceGetCount"); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return int(n), nil
}

// DriverVersion returns the CUDA version the installed driver supports
// (e.g. 13000 for 13.0).
func DriverVersion() (int, error) {
	if err := initDriver(); err != nil {
		return 0, err
	}
	var v C.int
	if err := cuErr(C.kt_cuDriverGetVersion(&v), "cuDriverGetVersion"); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Probe describes device ordinal without creating a context.
func Probe(ordinal int) (*Info, error) {
	n, err := DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the driver reports no GPU (CUDA_VISIBLE_DEVICES=%q)", ErrUnavailable, os.Getenv("CUDA_VISIBLE_DEVICES"))
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: GPU %d requested (--base-gpu-id) but only %d visible (CUDA_VISIBLE_DEVICES=%q)", ordinal, n, os.Getenv("CUDA_VISIBLE_DEVICES"))
	}
	var dev C.CUdevice
	if err := cuErr(C.kt_cuDeviceGet(&dev, C.int(ordinal)), "cuDeviceGet(%d)", ordinal); err != nil {
		return nil, err
	}
	info := &Info{Ordinal: ordinal}
	var name [256]C.char
	if err := cuErr(C.kt_cuDeviceGetName(&name[0], 256, dev), "cuDeviceGetName"); err != nil {
		return nil, err
	}
	info.Name = C.GoString(&name[0])
	attr := func(a int, dst *int) error {
		var v C.int
		if err := cuErr(C.kt_cuDeviceGetAttribute(&v, C.int(a), dev), "cuDeviceGetAttribute(%d)", a); err != nil {
			return err
		}
		*dst = int(v)
		return nil
	}
	for _, a := range []struct {
		attr int
		dst  *int
	}{
		{attrComputeCapMajor, &info.Major}, {attrComputeCapMinor, &info.Minor},
		{attrMultiprocessorCount, &info.SMs}, {attrL2CacheSize, &info.L2Bytes},
		{attrMaxSharedPerBlockOptin, &info.MaxSharedOptin},
	} {
		if err := attr(a.attr, a.dst); err != nil {
			return nil, err
		}
	}
	var total C.size_t
	if err := cuErr(C.kt_cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem"); err != nil {
		return nil, err
	}
	info.TotalMem = int64(total)
	var bus [64]C.char
	if cuErr(C.kt_cuDeviceGetPCIBusId(&bus[0], 64, dev), "cuDeviceGetPCIBusId") == nil {
		info.PCIBusID = C.GoString(&bus[0])
		info.PCIeLink = pcieLink(info.PCIBusID)
	}
	info.DriverVersion, _ = DriverVersion()
	info.DriverRelease = driverRelease()
	// Free memory needs a context; the primary context is shared with the
	// Device that may be opened later, so retaining it here costs little.
	var ctx C.CUcontext
	if err := cuErr(C.kt_cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"); err == nil {
		var free, tot C.size_t
		if cuErr(C.kt_cuMemGetInfo(ctx, &free, &tot), "cuMemGetInfo") == nil {
			info.FreeMem = int64(free)
		}
		C.kt_cuDevicePrimaryCtxRelease(dev)
	}
	return info, nil
}

// pcieLink reads the link's speed and width from sysfs ("" if not exposed,
// as in some VMs).
func pcieLink(busID string) string {
	dir := filepath.Join("/sys/bus/pci/devices", strings.ToLower(busID))
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	speed, width := read("current_link_speed"), read("current_link_width")
	if speed == "" || width == "" {
		return ""
	}
	gen := map[string]string{"2.5": "Gen1", "5.0": "Gen2", "8.0": "Gen3", "16.0": "Gen4", "32.0": "Gen5", "64.0": "Gen6"}
	f := strings.Fields(speed)
	if len(f) > 0 {
		if g, ok := gen[f[0]]; ok {
			return fmt.Sprintf("%s x%s (%s)", g, width, speed)
		}
	}
	return fmt.Sprintf("x%s (%s)", width, speed)
}

// driverRelease reads the NVIDIA kernel module version, if exposed.
func driverRelease() string {
	if b, err := os.ReadFile("/sys/module/nvidia/version"); err == nil {
		return strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/driver/nvidia/version"); err == nil {
		// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..."
		f := strings.Fields(string(b))
		for i, w := range f {
			if w == "Module" && i+1 < len(f) {
				return f[i+1]
			}
		}
	}
	return ""
}

// Options configure Open. The zero value uses GPU 0 and 88% of its memory
// for the pool.
type Options struct {
	// Ordinal selects the GPU among those visible (--base-gpu-id).
	Ordinal int
	// MemFractionStatic is the fraction of the GPU's total memory kt's
	// memory pool takes for weights, KV cache and activations
	// (--mem-fraction-static); 0 means DefaultMemFraction.
	MemFractionStatic float64
	// CacheDir is where compiled kernels are kept; "" means
	// DefaultKernelCacheDir().
	CacheDir string
	// PoolBytes, when > 0, sizes the pool directly (tests, benchmarks).
	PoolBytes int64
}

// DefaultMemFraction is used when Options.MemFractionStatic is 0.
const DefaultMemFraction = 0.88

// Device is an open GPU: its primary context, memory pool, a cuBLASLt
// handle and the compiled kernels.
type Device struct {
	Info   Info
	dev    C.CUdevice
	ctx    C.CUcontext
	Pool   *Pool
	lt     *blasLt
	kern   *kernels
	closed bool
	// pickRowsOnly is set once a cluster launch of m_pick failed (a GPU
	// or partition that cannot place 8 blocks together): picks then take
	// m_pick_rows, one block per row.
	pickRowsOnly *atomic.Bool
	// earlyLaunch: kernels that open with KT_GRID_DEP are launched with
	// programmatic stream serialization (EarlyLaunch).
	earlyLaunch bool
}

// EarlyLaunch says whether kernels are launched ahead of their
// predecessors' end (programmatic dependent launch). It is on where the
// GPU (compute capability 9.0 or newer) and the driver (CUDA 12.3 or
// newer, which also captures it into graphs) have it, unless
// settings.CUDAPDL turns it off: each kernel may then be scheduled while
// the one ahead of it in the stream still runs, waiting on the device
// (common.cuh's KT_GRID_DEP) instead of paying a launch gap.
func (d *Device) EarlyLaunch() bool { return d.earlyLaunch }

// Open opens the GPU described by opt. Errors that mean "no usable GPU"
// wrap ErrUnavailable; the message says which library or call failed.
func Open(opt Options) (*Device, error) {
	if err := initDriver(); err != nil {
		return nil, err
	}
	if err := LoadLibraries().required(); err != nil {
		return nil, err
	}
	pdl, err := settings.CUDAPDL.Get()
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	info, err := Probe(opt.Ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{Info: *info, pickRowsOnly: new(atomic.Bool)}
	if err := cuErr(C.kt_cuDeviceGet(&d.dev, C.int(opt.Ordinal)), "cuDeviceGet(%d)", opt.Ordinal); err != nil {
		return nil, err
	}
	if err := cuErr(C.kt_cuDevicePrimaryCtxRetain(&d.ctx, d.dev), "cuDevicePrimaryCtxRetain(%d)", opt.Ordinal); err != nil {
		return nil, err
	}
	free, total, err := d.MemInfo()
	if err != nil {
		d.Close()
		return nil, err
	}
	size := opt.PoolBytes
	if size <= 0 {
		frac := opt.MemFractionStatic
		if frac == 0 {
			frac = DefaultMemFraction
		}
		size, err = PoolSize(total, free, frac)
		if err != nil {
			d.Close()
			return nil, err
		}
	}
	if d.Pool, err = newPool(d, size); err != nil {
		d.Close()
		return nil, err
	}
	if d.lt, err = newBlasLt(d); err != nil {
		d.Close()
		return nil, err
	}
	dir := opt.CacheDir
	if dir == "" {
		dir = DefaultKernelCacheDir()
	}
	d.kern = newKernels(d, dir)
	d.earlyLaunch = info.Major >= 9 && info.DriverVersion >= 12030 && C.kt_has_launch_ex() != 0 && pdl
	return d, nil
}

// MemInfo returns the device's free and total memory in bytes.
func (d *Device) MemInfo() (free, total int64, err error) {
	var f, t C.size_t
	if err := cuErr(C.kt_cuMemGetInfo(d.ctx, &f, &t), "cuMemGetInfo"); err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}

// Synchronize waits for all work on the device.
func (d *Device) Synchronize() error {
	return cuErr(C.kt_cuCtxSynchronize(d.ctx), "cuCtxSynchronize")
}

// Close releases the kernels, cuBLASLt handle, pool and context.
func (d *Device) Close() error {
	if d == nil || d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if d.ctx != nil {
		errs = append(errs, d.Synchronize())
	}
	if d.kern != nil {
		errs = append(errs, d.kern.close())
	}
	if d.lt != nil {
		errs = append(errs, d.lt.close())
	}
	if d.Pool != nil {
		errs = append(errs, d.Pool.release())
	}
	if d.ctx != nil {
		errs = append(errs, cuErr(C.kt_cuDevicePrimaryCtxRelease(d.dev), "cuDevicePrimaryCtxRelease"))
	}
	return errors.Join(errs...)
}
