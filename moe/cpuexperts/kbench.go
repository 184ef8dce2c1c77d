//go:build linux && amd64 && cgo

package cpuexperts

/*
#include <stdlib.h>
#include "kt_moe.h"
double kt_amx_kbench(int fmt, int m, int k, int kch, int pf, int pfm, int nxl, int var, int i4pf, int i4fuse, int reps,
                     int64_t wbytes, int nthreads, const int* cpus, int noamx, double* flops);
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// amxKnobs are the result-neutral settings of the AMX prefill kernel body.
type amxKnobs struct {
	kch, pf, pfm, nxl int
	variant           int // < 0: a peak probe of the tile unit (kbench.c); 0: the kernel
	nt, tiled         bool
	i4pf              int  // the int4 unpack's prefetch distance; the decode kernels' with noAMX (kernel benchmark only)
	i4fuse            bool // int4 calls: the fused unpack (kernel benchmark only)
}

// kbFormat is the weight format of a kernel benchmark (kbench.c).
type kbFormat int

const (
	kbBF16  kbFormat = iota // bf16 panels
	kbInt8                  // int8 panels, one scale per row
	kbInt4                  // int4 panels, one scale per row (AMXINT4)
	kbInt4G                 // int4 panels, a scale per row and group of 128 (INT4_KGROUP)
)

// kbOf is the tile format of a bf16 or int8 tile product.
func kbOf(i8 bool) kbFormat {
	if i8 {
		return kbInt8
	}
	return kbBF16
}

// String names the format as the benchmarks' sub-benchmark names do.
func (f kbFormat) String() string {
	return [...]string{"bf16", "int8", "int4", "int4g"}[f]
}

// pairBytes is the weight bytes of one 32-row kernel call at K k (two
// 16-row panels; C's panel_bytes).
func (f kbFormat) pairBytes(k int) int64 {
	return int64(k) * [...]int64{64, 32, 16, 16}[f]
}

// c is the format's KT_FMT_* value.
func (f kbFormat) c() C.int {
	return [...]C.int{C.KT_FMT_BF16_PK, C.KT_FMT_I8_PK, C.KT_FMT_I4_PK, C.KT_FMT_I4G_PK}[f]
}

// amxKernelBench times the AMX prefill kernel of format f alone
// (kbench.c): one thread per CPU in cpus, each streaming wbytes of its own
// weights in 32-row calls over m tokens of k columns, reps times. It returns
// the TFLOPS of all threads together (flops over the slowest thread's time).
// noAMX runs the AVX-512 kernels of the same formats instead (tests of the
// harness on CPUs without AMX; the decode kernels beside the AMX ones).
func amxKernelBench(f kbFormat, m, k int, kn amxKnobs, reps int, wbytes int64, cpus []int, noAMX bool) (float64, error) {
	fmtc := f.c()
	cc := (*C.int)(C.malloc(C.size_t(len(cpus)+1) * C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(cc))
	cs := unsafe.Slice(cc, len(cpus)+1)
	for i, c := range cpus {
		cs[i] = C.int(c)
	}
	var flops C.double
	secs := C.kt_amx_kbench(fmtc, C.int(m), C.int(k), C.int(kn.kch), C.int(kn.pf), C.int(kn.pfm), C.int(kn.nxl),
		C.int(kn.variant), C.int(kn.i4pf), b2i(kn.i4fuse), C.int(reps), C.int64_t(wbytes), C.int(len(cpus)), cc, b2i(noAMX), &flops)
	if secs <= 0 {
		return 0, fmt.Errorf("AMX kernel benchmark failed (m=%d k=%d, %d threads)", m, k, len(cpus))
	}
	return float64(flops) / float64(secs) / 1e12, nil
}
