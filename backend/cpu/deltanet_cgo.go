//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -lm
#include "deltanet.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/ktserve/kt/backend"
)

// deltaISA picks the kernel variant: 1 for AVX-512 (F, VL, DQ and FMA, with
// the OS saving ZMM state, which x/sys/cpu checks), 0 for portable C.
func deltaISA() int {
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ && cpu.X86.HasFMA {
		return 1
	}
	return 0
}

// deltaISAs lists the kernel variants this machine can run.
func deltaISAs() []int {
	if deltaISA() == 1 {
		return []int{0, 1}
	}
	return []int{0}
}

// deltaGroup runs tokens 0..n-1 of key-head group kh in C.
func deltaGroup(isa int, sh backend.DeltaShape, st *DeltaState, q, k, v []float32, ldqk, ldv int, g, beta []float32, n, kh, rows0 int, out []float32) {
	scratch := make([]float32, 2*sh.KDim+2*sh.VDim+9*backend.DeltaChunkSize)
	C.gdn_group(C.int(isa), C.int(sh.KHeads), C.int(sh.VHeads), C.int(sh.KDim), C.int(sh.VDim),
		cf(st.S), cf(st.K), cf(st.V), cf(st.G), cf(q), cf(k), cf(v), C.long(ldqk), C.long(ldv), cf(g), cf(beta),
		C.int(n), C.int(kh), C.int(rows0), cf(out), cf(scratch))
}

// deltaFlushAll folds the first rows open rows of every head into st.S.
func deltaFlushAll(isa int, sh backend.DeltaShape, st *DeltaState, rows int) {
	dec := make([]float32, 5*backend.DeltaChunkSize)
	C.gdn_materialize(C.int(isa), C.int(sh.KHeads), C.int(sh.VHeads), C.int(sh.KDim), C.int(sh.VDim),
		cf(st.S), cf(st.K), cf(st.V), cf(st.G), C.int(rows), cf(dec))
}

// cf passes a float32 slice to C (nil when empty).
func cf(x []float32) *C.float {
	if len(x) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&x[0]))
}
