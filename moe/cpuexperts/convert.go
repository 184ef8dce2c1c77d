//go:build linux && amd64 && cgo

package cpuexperts

/*
#include <stdint.h>
void kt_row_to_act(const void* src, int src_bf16, int k, int act, void* dst, float* scale);
void kt_avx2_row_to_act(const void* src, int src_bf16, int n, int act, void* dst, float* scale, float* tmp);
void kt_avx512_row_to_act(const void* src, int src_bf16, int n, int act, void* dst, float* scale, float* tmp);
void kt_avx2_silu_mul(const float* g, const float* u, float* h, int n);
void kt_avx512_silu_mul(const float* g, const float* u, float* h, int n);
*/
import "C"

import "unsafe"

// actS8 is KT_ACT_S8 (kt_internal.h): symmetric per-row int8 activations.
const actS8 = 3

// quantizeRowS8 converts one f32 row to int8 activations in q and returns
// its scale, with the engine's conversion of the given vector width (512,
// 256; 0 = the portable reference of pack.c), for the tests; tmp holds
// len(x) floats. The caller checks that the CPU has the width's
// instructions.
func quantizeRowS8(width int, x []float32, q []int8, tmp []float32) float32 {
	var s C.float
	if len(x) == 0 {
		return 0
	}
	src, dst := unsafe.Pointer(&x[0]), unsafe.Pointer(&q[0])
	switch width {
	case 512:
		C.kt_avx512_row_to_act(src, 0, C.int(len(x)), actS8, dst, &s, (*C.float)(&tmp[0]))
	case 256:
		C.kt_avx2_row_to_act(src, 0, C.int(len(x)), actS8, dst, &s, (*C.float)(&tmp[0]))
	default:
		C.kt_row_to_act(src, 0, C.int(len(x)), actS8, dst, &s)
	}
	return float32(s)
}

// siluMul computes h = silu(g) * u with the engine's kernel of the given
// vector width (512 or 256), for the tests; the caller checks that the CPU
// has the width's instructions.
func siluMul(width int, g, u, h []float32) {
	if len(g) == 0 {
		return
	}
	pg, pu, ph := (*C.float)(&g[0]), (*C.float)(&u[0]), (*C.float)(&h[0])
	if width == 512 {
		C.kt_avx512_silu_mul(pg, pu, ph, C.int(len(g)))
	} else {
		C.kt_avx2_silu_mul(pg, pu, ph, C.int(len(g)))
	}
}
