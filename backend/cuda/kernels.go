//go:build cgo

package cuda

/*
#include <stdlib.h>
#include "ktcuda.h"
*/
import "C"

import (
	"embed"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unsafe"
)

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// kernelPrelude is pasted in front of every module: NVRTC is given no
// include path, so shared helpers come from common.cuh this way.
func kernelPrelude() string {
	b, err := kernelFS.ReadFile("kernels/common.cuh")
	if err != nil {
		panic("cuda: embedded kernels/common.cuh missing: " + err.Error())
	}
	return string(b)
}

// globalRE matches a kernel's declaration: extern "C" __global__, launch bounds
// before or after void, an attribute macro (PICK_CLUSTER), then its name.
var globalRE = regexp.MustCompile(`extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(?:__launch_bounds__\([^)]*\)\s+)?(?:[A-Z][A-Z0-9_]*\s+)?(\w+)\s*\(`)

// kernelIndex is what the embedded sources say about their kernels.
type kernelIndex struct {
	mods    map[string]string // module -> full source (prelude included)
	names   map[string]string // kernel -> module
	params  map[string]int    // kernel -> parameter count
	gridDep map[string]bool   // kernel -> its body opens with KT_GRID_DEP()
}

// gridDepRE matches the first statement of a kernel body that waits for the
// grids ahead of it (common.cuh's KT_GRID_DEP).
var gridDepRE = regexp.MustCompile(`^\{\s*KT_GRID_DEP\(\);`)

// kernelSources indexes the embedded modules: each module's full source,
// the kernel name -> module map, each kernel's parameter count (launch
// checks calls against it, so a missing argument is an error naming the
// kernel rather than a fault on the device) and whether its body opens with
// KT_GRID_DEP (only such kernels may be launched ahead of their
// predecessor's end).
func kernelSources() (kernelIndex, error) {
	ix := kernelIndex{mods: map[string]string{}, names: map[string]string{}, params: map[string]int{}, gridDep: map[string]bool{}}
	ents, err := kernelFS.ReadDir("kernels")
	if err != nil {
		return ix, err
	}
	prelude := kernelPrelude()
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".cu") {
			continue
		}
		b, err := kernelFS.ReadFile("kernels/" + e.Name())
		if err != nil {
			return ix, err
		}
		src := string(b)
		mod := strings.TrimSuffix(e.Name(), ".cu")
		ix.mods[mod] = prelude + "\n#line 1 \"" + e.Name() + "\"\n" + src
		for _, m := range globalRE.FindAllStringSubmatchIndex(src, -1) {
			name := src[m[2]:m[3]]
			params := src[m[1]:]
			body := ""
			if end := strings.Index(params, ")"); end >= 0 {
				if open := strings.Index(params[end:], "{"); open >= 0 {
					body = params[end+open:]
				}
				params = params[:end]
			}
			nparams := 0
			if strings.TrimSpace(params) != "" {
				nparams = strings.Count(params, ",") + 1
			}
			if prev, dup := ix.names[name]; dup {
				return ix, fmt.Errorf("cuda: kernel %s defined in both %s and %s", name, prev, mod)
			}
			ix.params[name] = nparams
			ix.gridDep[name] = gridDepRE.MatchString(body)
			ix.names[name] = mod
		}
	}
	return ix, nil
}

// kernels compiles modules on first use and caches function handles.
type kernels struct {
	d        *Device
	dir      string
	mu       sync.Mutex
	src      kernelIndex
	srcErr   error
	mods     map[string]C.CUmodule
	funcs    map[string]kernelFunc
	compiled map[string]string // module -> "cache hit" / "compiled" for doctor
}

// kernelFunc is a loaded kernel with what launch needs of the index: its
// parameter count (-1: not counted) and whether it may be launched ahead
// of its predecessor's end (it opens with KT_GRID_DEP).
type kernelFunc struct {
	f       C.CUfunction
	params  int
	gridDep bool
}

func newKernels(d *Device, dir string) *kernels {
	k := &kernels{d: d, dir: dir, mods: map[string]C.CUmodule{}, funcs: map[string]kernelFunc{}, compiled: map[string]string{}}
	k.src, k.srcErr = kernelSources()
	return k
}

// nvrtcOptions are passed to every compilation (and hashed into the key).
var nvrtcOptions = []string{"-DKT_NVRTC=1"}

// loadModule compiles or reads from cache, then loads module mod. Caller
// holds k.mu.
func (k *kernels) loadModule(mod string) (C.CUmodule, error) {
	if m, ok := k.mods[mod]; ok {
		return m, nil
	}
	src, ok := k.src.mods[mod]
	if !ok {
		return nil, fmt.Errorf("cuda: no kernel module %q", mod)
	}
	major, minor, err := NVRTCVersion()
	if err != nil {
		return nil, err
	}
	archs, err := nvrtcArchs()
	if err != nil {
		return nil, err
	}
	arch, cubin := compileTarget(k.d.Info.Major*10+k.d.Info.Minor, archs)
	key := cacheKey(mod, src, nvrtcOptions, arch, k.d.Info.DriverVersion, major, minor)
	path := filepath.Join(k.dir, key)
	var image []byte
	status := "compiled"
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		image, status = b, "cache hit"
	} else {
		if image, err = nvrtcCompile(mod+".cu", src, arch, cubin, nvrtcOptions); err != nil {
			return nil, err
		}
		// A cache that cannot be written only costs a recompile next time.
		_ = writeFileAtomic(path, image)
	}
	m, err := k.moduleLoad(mod, image)
	if err != nil && status == "cache hit" {
		// A corrupt cache file: compile afresh and overwrite it.
		if image, err = nvrtcCompile(mod+".cu", src, arch, cubin, nvrtcOptions); err != nil {
			return nil, err
		}
		_ = writeFileAtomic(path, image)
		status = "recompiled (cache entry unusable)"
		m, err = k.moduleLoad(mod, image)
	}
	if err != nil {
		return nil, err
	}
	k.mods[mod] = m
	k.compiled[mod] = status + " " + path
	return m, nil
}

func (k *kernels) moduleLoad(mod string, image []byte) (C.CUmodule, error) {
	cimg := C.CBytes(image)
	defer C.free(cimg)
	var m C.CUmodule
	if err := cuErr(C.kt_cuModuleLoadData(k.d.ctx, &m, cimg), "cuModuleLoadData(%s)", mod); err != nil {
		return nil, err
	}
	return m, nil
}

// function returns kernel name, compiling its module if needed.
func (k *kernels) function(name string) (kernelFunc, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kf, ok := k.funcs[name]; ok {
		return kf, nil
	}
	if k.srcErr != nil {
		return kernelFunc{}, k.srcErr
	}
	mod, ok := k.src.names[name]
	if !ok {
		return kernelFunc{}, fmt.Errorf("cuda: no kernel named %q in the embedded sources", name)
	}
	m, err := k.loadModule(mod)
	if err != nil {
		return kernelFunc{}, err
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	kf := kernelFunc{params: -1, gridDep: k.src.gridDep[name]}
	if n, ok := k.src.params[name]; ok {
		kf.params = n
	}
	if err := cuErr(C.kt_cuModuleGetFunction(k.d.ctx, &kf.f, m, cname), "cuModuleGetFunction(%s)", name); err != nil {
		return kernelFunc{}, err
	}
	k.funcs[name] = kf
	return kf, nil
}

// CompileAll compiles (or loads from the cache) every embedded module and
// reports, per module, whether it came from the cache. kt doctor uses it.
func (d *Device) CompileAll() (map[string]string, error) {
	k := d.kern
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.srcErr != nil {
		return nil, k.srcErr
	}
	for mod := range k.src.mods {
		if _, err := k.loadModule(mod); err != nil {
			return nil, err
		}
	}
	out := map[string]string{}
	for m, s := range k.compiled {
		out[m] = s
	}
	return out, nil
}

// loadAll loads every embedded kernel function, so that no later launch
// loads one. Ranks that wait for each other on the GPU need that (a
// same-device group): loading a function may wait for the whole context
// to be idle, which a rank's barrier kernel, waiting for a rank whose host
// thread queues behind the load, never is.
func (k *kernels) loadAll() error {
	k.mu.Lock()
	names := make([]string, 0, len(k.src.names))
	for name := range k.src.names {
		names = append(names, name)
	}
	k.mu.Unlock()
	for _, name := range names {
		kf, err := k.function(name)
		if err != nil {
			return err
		}
		// reading an attribute loads a lazily loaded function
		// (CU_FUNC_ATTRIBUTE_NUM_REGS)
		var regs C.int
		if err := cuErr(C.kt_cuFuncGetAttribute(k.d.ctx, &regs, 4, kf.f), "cuFuncGetAttribute(%s)", name); err != nil {
			return err
		}
	}
	return nil
}

func (k *kernels) close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var first error
	for name, m := range k.mods {
		if err := cuErr(C.kt_cuModuleUnload(k.d.ctx, m), "cuModuleUnload(%s)", name); err != nil && first == nil {
			first = err
		}
	}
	k.mods = map[string]C.CUmodule{}
	k.funcs = map[string]kernelFunc{}
	return first
}

// dim3 is a grid or block shape.
type dim3 struct{ x, y, z uint32 }

func grid1(x int) dim3    { return dim3{uint32(x), 1, 1} }
func grid2(x, y int) dim3 { return dim3{uint32(x), uint32(y), 1} }

// packArgs turns kernel arguments into 8-byte slots. Supported: Buffer
// and uint64 (device pointers), int (passed as int32, checked), int32,
// int64 (a `long long` parameter), uint32, float32, float64 (passed as
// float32).
func packArgs(args []any) ([]uint64, error) {
	out := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case Buffer:
			out[i] = v.Ptr
		case uint64:
			out[i] = v
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("cuda: kernel argument %d: int %d overflows int32", i, v)
			}
			out[i] = uint64(uint32(int32(v)))
		case int32:
			out[i] = uint64(uint32(v))
		case int64:
			out[i] = uint64(v)
		case uint32:
			out[i] = uint64(v)
		case float32:
			out[i] = uint64(math.Float32bits(v))
		case float64:
			out[i] = uint64(math.Float32bits(float32(v)))
		default:
			return nil, fmt.Errorf("cuda: kernel argument %d: unsupported type %T", i, a)
		}
	}
	return out, nil
}

// launch queues kernel name on s.
func (d *Device) launch(s *Stream, name string, grid, block dim3, smem int, args ...any) error {
	if grid.x == 0 || grid.y == 0 || grid.z == 0 {
		return nil // nothing to do
	}
	kf, err := d.kern.function(name)
	if err != nil {
		return err
	}
	if kf.params >= 0 && kf.params != len(args) {
		return fmt.Errorf("cuda: launching %s: %d arguments for %d parameters", name, len(args), kf.params)
	}
	slots, err := packArgs(args)
	if err != nil {
		return fmt.Errorf("cuda: launching %s: %w", name, err)
	}
	if smem > 48<<10 {
		// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
		if err := cuErr(C.kt_cuFuncSetAttribute(d.ctx, kf.f, 8, C.int(smem)), "cuFuncSetAttribute(%s, smem=%d)", name, smem); err != nil {
			return err
		}
	}
	var p *C.uint64_t
	if len(slots) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&slots[0]))
	}
	early := C.int(0)
	if d.earlyLaunch && kf.gridDep {
		early = 1
	}
	r := C.kt_launch(d.ctx, kf.f, C.uint(grid.x), C.uint(grid.y), C.uint(grid.z), C.uint(block.x), C.uint(block.y), C.uint(block.z),
		C.uint(smem), s.s, p, C.int(len(slots)), early)
	return cuErr(r, "cuLaunchKernel(%s grid=%v block=%v smem=%d)", name, grid, block, smem)
}
