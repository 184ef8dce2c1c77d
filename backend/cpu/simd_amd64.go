//go:build amd64 && cgo

package cpu

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -lm
#include "kernels.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/ktserve/kt/tensor"
)

// haveAVX512 reports whether the CPU and OS support the AVX-512 subsets the
// C kernels use (x/sys/cpu also checks that the OS saves the ZMM state).
func haveAVX512() bool {
	return cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasFMA
}

// mmSIMD computes out rows [0,n) x columns [o0,o1) with the AVX-512 kernel
// for w's dtype; it reports false when the dtype has no kernel.
func mmSIMD(x []float32, ldx, n int, w *Tensor, k, o0, o1 int, out []float32, ldo int) bool {
	xp := (*C.float)(unsafe.Pointer(unsafe.SliceData(x)))
	op := (*C.float)(unsafe.Pointer(unsafe.SliceData(out)))
	a := [...]C.long{C.long(ldx), C.long(n), C.long(k), C.long(o0), C.long(o1), C.long(ldo)}
	switch w.dt {
	case tensor.F32:
		C.kt_mm_f32_avx512(xp, a[0], a[1], unsafe.Pointer(unsafe.SliceData(w.f32)), a[2], a[3], a[4], op, a[5])
	case tensor.BF16:
		C.kt_mm_bf16_avx512(xp, a[0], a[1], unsafe.Pointer(unsafe.SliceData(w.u16)), a[2], a[3], a[4], op, a[5])
	case tensor.F16:
		C.kt_mm_f16_avx512(xp, a[0], a[1], unsafe.Pointer(unsafe.SliceData(w.u16)), a[2], a[3], a[4], op, a[5])
	default:
		return false
	}
	return true
}

// mmF32SIMD is kt_mm_f32_avx512 over the rows x k float32 matrix w:
// out[i*ldo+o] = x[i] · w[o] for i < n, o < rows.
func mmF32SIMD(x []float32, ldx, n int, w []float32, k, rows int, out []float32, ldo int) {
	C.kt_mm_f32_avx512((*C.float)(unsafe.Pointer(unsafe.SliceData(x))), C.long(ldx), C.long(n), unsafe.Pointer(unsafe.SliceData(w)),
		C.long(k), 0, C.long(rows), (*C.float)(unsafe.Pointer(unsafe.SliceData(out))), C.long(ldo))
}

// fp8DequantSIMD decodes one FP8 row: dst[k] = e4m3(q[k]) * cs[k].
func fp8DequantSIMD(q []uint8, cs, dst []float32) {
	C.kt_fp8_dequant_avx512((*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(q))), (*C.float)(unsafe.Pointer(unsafe.SliceData(cs))),
		C.long(len(q)), (*C.float)(unsafe.Pointer(unsafe.SliceData(dst))))
}

// attnSIMD runs kt_attn_avx512 for one token (see kernels_amd64.c).
func attnSIMD(q, kc, vc []float32, pages []int32, pageSize, kvHeads, hd, heads, npos int, scale float32, scores, out []float32, h0, h1 int) {
	C.kt_attn_avx512((*C.float)(unsafe.Pointer(unsafe.SliceData(q))),
		(*C.float)(unsafe.Pointer(unsafe.SliceData(kc))),
		(*C.float)(unsafe.Pointer(unsafe.SliceData(vc))),
		(*C.int32_t)(unsafe.Pointer(unsafe.SliceData(pages))),
		C.long(pageSize), C.long(kvHeads), C.long(hd), C.long(heads), C.long(npos), C.float(scale),
		(*C.float)(unsafe.Pointer(unsafe.SliceData(scores))),
		(*C.float)(unsafe.Pointer(unsafe.SliceData(out))), C.long(h0), C.long(h1))
}

// sumSIMD sums x with AVX-512 loads (bandwidth probe).
func sumSIMD(x []float32) float32 {
	return float32(C.kt_sum_avx512((*C.float)(unsafe.Pointer(unsafe.SliceData(x))), C.long(len(x))))
}
