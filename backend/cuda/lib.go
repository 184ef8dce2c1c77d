//go:build cgo

// Package cuda is kt's CUDA backend. The CUDA driver (libcuda.so.1),
// cuBLASLt, NVRTC and (for reporting only) NCCL are opened with dlopen at run
// time through C trampolines (ktcuda.c), so kt builds and tests with no CUDA
// headers or libraries present; where they are missing, Probe and Open say
// why and the caller runs on the CPU.
//
// Kernels are CUDA C sources embedded in the binary (kernels/*.cu), compiled
// by NVRTC for the device's architecture at first use and cached on disk,
// keyed by source hash, architecture and driver version.
//
// All device work goes through a Device (one CUDA primary context). Every C
// trampoline makes that context current on the calling OS thread, so a
// Device may be used from any goroutine; it is not safe for concurrent use
// unless a method says so.
package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "ktcuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/ktserve/kt/internal/settings"
)

// Library names tried for each component, newest first. A bare name is
// resolved by the dynamic linker (LD_LIBRARY_PATH, ld.so.cache); the same
// names are then tried in each directory of searchDirs.
var (
	driverNames   = []string{"libcuda.so.1", "libcuda.so"}
	cublasLtNames = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}
	nvrtcNames    = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}
	ncclNames     = []string{"libnccl.so.2", "libnccl.so"}
)

// searchDirs lists directories where CUDA libraries commonly live, besides
// the dynamic linker's own path: settings.CUDALibDirs first, then
// $CUDA_HOME/$CUDA_PATH, /usr/local/cuda, and the nvidia-* Python wheels
// that PyTorch installs.
func searchDirs() []string {
	dirs := settings.CUDALibDirs.Get()
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := os.Getenv(env); v != "" {
			dirs = append(dirs, filepath.Join(v, "lib64"), filepath.Join(v, "lib"))
		}
	}
	dirs = append(dirs,
		"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
		"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
		"/usr/lib/x86_64-linux-gnu", "/usr/lib64")
	for _, pat := range []string{
		"/usr/local/cuda-*/lib64",
		"/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib",
		"/usr/local/lib/python3*/dist-packages/nvidia/*/lib",
		"/usr/local/lib/python3*/site-packages/nvidia/*/lib",
		"/usr/lib/python3/dist-packages/nvidia/*/lib",
	} {
		m, _ := filepath.Glob(pat)
		sort.Sort(sort.Reverse(sort.StringSlice(m)))
		dirs = append(dirs, m...)
	}
	return dirs
}

// loadLib tries each name bare, then in each search directory; it returns
// the path that loaded, or an error listing what was tried.
func loadLib(what string, names []string, load func(*C.char) *C.char) (string, error) {
	var tried []string
	try := func(p string) bool {
		cs := C.CString(p)
		defer C.free(unsafe.Pointer(cs))
		if msg := load(cs); msg != nil {
			tried = append(tried, C.GoString(msg))
			return false
		}
		return true
	}
	for _, n := range names {
		if try(n) {
			return n, nil
		}
	}
	for _, d := range searchDirs() {
		for _, n := range names {
			p := filepath.Join(d, n)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			if try(p) {
				return p, nil
			}
		}
	}
	// Keep the message short: the first failure says why (usually "cannot
	// open shared object file").
	reason := "not found"
	if len(tried) > 0 {
		reason = tried[0]
		if len(tried) > 1 {
			reason += fmt.Sprintf(" (and %d more attempts)", len(tried)-1)
		}
	}
	return "", fmt.Errorf("%s: %s; set %s to the directory holding %s", what, reason, settings.CUDALibDirs.Name, names[0])
}

// Libraries records which CUDA libraries were found and where.
type Libraries struct {
	Driver, CuBLASLt, NVRTC, NCCL string // paths that loaded ("" if not)
	// Err holds the reason each missing library is missing, by component
	// ("driver", "cublaslt", "nvrtc", "nccl").
	Err map[string]error
}

var (
	libsOnce sync.Once
	libs     Libraries
)

// LoadLibraries opens the CUDA libraries once per process and reports what
// it found. It never fails: missing libraries are listed in Err.
func LoadLibraries() *Libraries {
	libsOnce.Do(func() {
		libs.Err = map[string]error{}
		var err error
		if libs.Driver, err = loadLib("CUDA driver", driverNames, func(p *C.char) *C.char { return C.kt_load_driver(p) }); err != nil {
			libs.Err["driver"] = err
		}
		if libs.CuBLASLt, err = loadLib("cuBLASLt", cublasLtNames, func(p *C.char) *C.char { return C.kt_load_cublaslt(p) }); err != nil {
			libs.Err["cublaslt"] = err
		}
		if libs.NVRTC, err = loadLib("NVRTC", nvrtcNames, func(p *C.char) *C.char { return C.kt_load_nvrtc(p) }); err != nil {
			libs.Err["nvrtc"] = err
		}
		if libs.NCCL, err = loadLib("NCCL", ncclNames, func(p *C.char) *C.char { return C.kt_load_nccl(p) }); err != nil {
			libs.Err["nccl"] = err
		}
	})
	return &libs
}

// ErrUnavailable is wrapped by every error that means "no usable GPU here":
// callers fall back to the CPU when errors.Is(err, ErrUnavailable).
var ErrUnavailable = errors.New("CUDA unavailable")

// required checks that the libraries a Device needs are loaded.
func (l *Libraries) required() error {
	var missing []string
	for _, k := range []string{"driver", "cublaslt", "nvrtc"} {
		if e := l.Err[k]; e != nil {
			missing = append(missing, e.Error())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(missing, "; "))
	}
	return nil
}

func ncclVersion() int {
	var v C.int
	if C.kt_ncclGetVersion(&v) != 0 {
		return 0
	}
	return int(v)
}
