//go:build amd64 && cgo

// FP8 (E4M3) weight decoding for the CPU backend's block-scaled MatMul.
// Like kernels_amd64.c, every function carries its own target attribute and
// Go calls it only after CPUID said yes.

#include <immintrin.h>
#include <stdint.h>
#include "kernels.h"

#define KT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

/*
 * dst[k] = e4m3(q[k]) * cs[k] for k < K, in float32. The E4M3 code's sign
 * goes to bit 31 and its 7 exponent+mantissa bits to bits 20..26: that
 * float is the code's value times 2^-120 exactly (subnormal codes become
 * float denormals), so one exact multiply by 2^120 gives the value, and the
 * multiply by the column's block scale rounds once, as the float32
 * dequantisation of the checkpoint does.
 */
KT_AVX512 void kt_fp8_dequant_avx512(const uint8_t *q, const float *cs, long K, float *dst) {
	const __m512i sm = _mm512_set1_epi32((int)0x80000000u), mm = _mm512_set1_epi32(0x07f00000);
	const __m512 p120 = _mm512_set1_ps(0x1p120f);
	for (long k = 0; k < K; k += 16) {
		__mmask16 m = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);
		__m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, q + k));
		__m512i bits = _mm512_or_si512(_mm512_and_si512(_mm512_slli_epi32(v, 24), sm), _mm512_and_si512(_mm512_slli_epi32(v, 20), mm));
		__m512 w = _mm512_mul_ps(_mm512_castsi512_ps(bits), p120);
		_mm512_mask_storeu_ps(dst + k, m, _mm512_mul_ps(w, _mm512_maskz_loadu_ps(m, cs + k)));
	}
}
