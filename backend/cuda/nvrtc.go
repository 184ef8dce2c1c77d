//go:build cgo

package cuda

/*
#include <stdlib.h>
#include "ktcuda.h"
*/
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ktserve/kt/internal/settings"
)

// NVRTCVersion returns the loaded NVRTC's version.
func NVRTCVersion() (major, minor int, err error) {
	if e := LoadLibraries().Err["nvrtc"]; e != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrUnavailable, e)
	}
	var a, b C.int
	if err := nvrtcErr(C.kt_nvrtcVersion(&a, &b), "nvrtcVersion"); err != nil {
		return 0, 0, err
	}
	return int(a), int(b), nil
}

// nvrtcArchs returns the SM versions NVRTC can emit code for (e.g. 90).
func nvrtcArchs() ([]int, error) {
	var buf [128]C.int
	var n C.int
	if err := nvrtcErr(C.kt_nvrtcGetSupportedArchs(&buf[0], 128, &n), "nvrtcGetSupportedArchs"); err != nil {
		return nil, err
	}
	out := make([]int, min(int(n), 128))
	for i := range out {
		out[i] = int(buf[i])
	}
	return out, nil
}

// compileTarget picks the NVRTC target for compute capability sm: real
// machine code (sm_XY, a cubin) when NVRTC supports it, else PTX for the
// newest virtual architecture NVRTC knows, which the driver JIT-compiles.
func compileTarget(sm int, supported []int) (arch string, cubin bool) {
	best := 0
	for _, a := range supported {
		if a == sm {
			return fmt.Sprintf("sm_%d", sm), true
		}
		if a < sm && a > best {
			best = a
		}
	}
	if best == 0 {
		best = sm
	}
	return fmt.Sprintf("compute_%d", best), false
}

// CompileError is a kernel source that NVRTC rejected, with its log.
type CompileError struct {
	Module string
	Arch   string
	Log    string
	Err    error
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("cuda: NVRTC compiling %s for %s: %v\n%s", e.Module, e.Arch, e.Err, strings.TrimSpace(e.Log))
}

func (e *CompileError) Unwrap() error { return e.Err }

// nvrtcCompile compiles src for arch and returns a cubin (or PTX, NUL
// terminated, for compute_XX targets).
func nvrtcCompile(name, src, arch string, cubin bool, extra []string) ([]byte, error) {
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.nvrtcProgram
	if err := nvrtcErr(C.kt_nvrtcCreateProgram(&prog, csrc, cname), "nvrtcCreateProgram("+name+")"); err != nil {
		return nil, err
	}
	defer C.kt_nvrtcDestroyProgram(&prog)
	opts := append([]string{"--gpu-architecture=" + arch, "--std=c++17", "-default-device"}, extra...)
	copts := make([]*C.char, len(opts))
	for i, o := range opts {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	// The options array is C memory so that no Go pointer to Go pointers
	// crosses into C.
	carr := (**C.char)(C.malloc(C.size_t(len(copts)) * C.size_t(unsafe.Sizeof(copts[0]))))
	defer C.free(unsafe.Pointer(carr))
	copy(unsafe.Slice(carr, len(copts)), copts)
	cerr := nvrtcErr(C.kt_nvrtcCompileProgram(prog, C.int(len(opts)), carr), "nvrtcCompileProgram("+name+")")
	if cerr != nil {
		var n C.size_t
		log := ""
		if C.kt_nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1 {
			buf := make([]byte, n)
			if C.kt_nvrtcGetProgramLog(prog, (*C.char)(unsafe.Pointer(&buf[0]))) == 0 {
				log = string(buf[:n-1])
			}
		}
		return nil, &CompileError{Module: name, Arch: arch, Log: log, Err: cerr}
	}
	var n C.size_t
	if cubin {
		if err := nvrtcErr(C.kt_nvrtcGetCUBINSize(prog, &n), "nvrtcGetCUBINSize"); err != nil {
			return nil, err
		}
		out := make([]byte, n)
		if err := nvrtcErr(C.kt_nvrtcGetCUBIN(prog, (*C.char)(unsafe.Pointer(&out[0]))), "nvrtcGetCUBIN"); err != nil {
			return nil, err
		}
		return out, nil
	}
	if err := nvrtcErr(C.kt_nvrtcGetPTXSize(prog, &n), "nvrtcGetPTXSize"); err != nil {
		return nil, err
	}
	out := make([]byte, n)
	if err := nvrtcErr(C.kt_nvrtcGetPTX(prog, (*C.char)(unsafe.Pointer(&out[0]))), "nvrtcGetPTX"); err != nil {
		return nil, err
	}
	return out, nil
}

// DefaultKernelCacheDir is settings.CUDACache when set, else <user cache
// dir>/kt/cuda, else a directory under the system temp dir.
func DefaultKernelCacheDir() string {
	if v := settings.CUDACache.Get(); v != "" {
		return v
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "kt", "cuda")
	}
	return filepath.Join(os.TempDir(), "kt-cuda-cache")
}

// cacheKey names a compiled module: the source hash (options included),
// the target architecture, the driver's CUDA version and NVRTC's version.
// Any of these changing gives a new file, so a stale binary is never used.
func cacheKey(module, src string, opts []string, arch string, driver, nvMajor, nvMinor int) string {
	h := sha256.New()
	h.Write([]byte(src))
	for _, o := range opts {
		h.Write([]byte{0})
		h.Write([]byte(o))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:20]
	ext := "cubin"
	if strings.HasPrefix(arch, "compute_") {
		ext = "ptx"
	}
	return fmt.Sprintf("%s-%s-%s-cuda%d-nvrtc%d.%d.%s", module, sum, arch, driver, nvMajor, nvMinor, ext)
}

// writeFileAtomic writes data to path through a temporary file and rename,
// so a concurrent reader never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
