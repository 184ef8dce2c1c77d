//go:build cgo && amd64

package vecmath

/*
#cgo CFLAGS: -O2
#include "vecmath.h"
*/
import "C"

import (
	"sync"
	"unsafe"
)

// level is the C loops' ISA: 2 AVX-512, 1 AVX2+FMA, 0 none (Go loops).
var level = sync.OnceValue(func() int { return int(C.vm_level()) })

// levels lists the C levels this CPU can run, best first (tests).
func levels() []int {
	var ls []int
	for l := level(); l > 0; l-- {
		ls = append(ls, l)
	}
	return ls
}

func maxAt(l int, x []float32) (float32, bool) {
	if l == 0 {
		return 0, false
	}
	return float32(C.vm_max(C.int(l), (*C.float)(unsafe.Pointer(&x[0])), C.int64_t(len(x)))), true
}

func sumExpAt(l int, x []float32, mx float32, store bool) (float64, bool) {
	if l == 0 {
		return 0, false
	}
	st := C.int(0)
	if store {
		st = 1
	}
	return float64(C.vm_sumexp(C.int(l), (*C.float)(unsafe.Pointer(&x[0])), C.int64_t(len(x)), C.float(mx), st)), true
}

// Level names the loops in use ("avx512", "avx2", "go").
func Level() string {
	return [...]string{"go", "avx2", "avx512"}[level()]
}

func scaleMaxAt(l int, x []float32, s float32) (float32, bool) {
	if l == 0 {
		return 0, false
	}
	return float32(C.vm_scalemax(C.int(l), (*C.float)(unsafe.Pointer(&x[0])), C.int64_t(len(x)), C.float(s))), true
}

func expBlocksAt(l int, x []float32, mx float32, bs int, out []float64) (float64, bool) {
	if l == 0 {
		return 0, false
	}
	return float64(C.vm_expblocks(C.int(l), (*C.float)(unsafe.Pointer(&x[0])), C.int64_t(len(x)), C.float(mx), C.int64_t(bs),
		(*C.double)(unsafe.Pointer(&out[0])))), true
}

func aboveAt(l int, x []float32, thr float32, out []int32) ([]int32, bool) {
	if l == 0 {
		return nil, false
	}
	n := C.vm_above(C.int(l), (*C.float)(unsafe.Pointer(&x[0])), C.int64_t(len(x)), C.float(thr), (*C.int32_t)(unsafe.Pointer(&out[0])))
	return out[:n], true
}
