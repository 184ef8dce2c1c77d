//go:build amd64 && cgo

// AVX-512 kernels of the CPU backend. Every function carries its own target
// attribute: the file is compiled without -mavx512*, so the rest of the
// binary runs on any x86-64, and Go calls these only after CPUID said yes.

#include <immintrin.h>
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include "kernels.h"

#define KT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

/* Load 16 weights as f32, (masked tail: m has the valid lanes). */
KT_AVX512 static inline __m512 ld_f32(const void *p, __mmask16 m) {
	return _mm512_maskz_loadu_ps(m, p);
}
KT_AVX512 static inline __m512 ld_bf16(const void *p, __mmask16 m) {
	__m256i v = _mm256_maskz_loadu_epi16(m, p);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}
KT_AVX512 static inline __m512 ld_f16(const void *p, __mmask16 m) {
	__m256i v = _mm256_maskz_loadu_epi16(m, p);
	return _mm512_cvtph_ps(v);
}

/*
 * out[i*ldo + o] = sum_k x[i*ldx + k] * w[o*k + k'] for i < n, o0 <= o < o1.
 * Register block: 4 tokens x 4 weight rows, 16 accumulators.
 */
#define KT_MM(NAME, LD, WT)                                                        \
KT_AVX512 void NAME(const float *x, long ldx, long n, const void *wv, long K,     \
                    long o0, long o1, float *out, long ldo) {                      \
	const WT *w = (const WT *)wv;                                                  \
	long kfull = K & ~15L;                                                         \
	__mmask16 tail = (__mmask16)((1u << (K & 15)) - 1);                            \
	long o = o0;                                                                   \
	for (; o + 4 <= o1; o += 4) {                                                  \
		const WT *w0 = w + o * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;         \
		long i = 0;                                                                \
		for (; i + 4 <= n; i += 4) {                                               \
			const float *x0 = x + i * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx,         \
			            *x3 = x2 + ldx;                                            \
			__m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;     \
			__m512 a10 = a00, a11 = a00, a12 = a00, a13 = a00;                     \
			__m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00;                     \
			__m512 a30 = a00, a31 = a00, a32 = a00, a33 = a00;                     \
			for (long k = 0; k <= kfull; k += 16) {                                \
				__mmask16 m = k < kfull ? (__mmask16)0xffff : tail;                 \
				if (!m) break;                                                     \
				__m512 b0 = LD(w0 + k, m), b1 = LD(w1 + k, m), b2 = LD(w2 + k, m), \
				       b3 = LD(w3 + k, m);                                         \
				__m512 x = _mm512_maskz_loadu_ps(m, x0 + k);                        \
				a00 = _mm512_fmadd_ps(x, b0, a00); a01 = _mm512_fmadd_ps(x, b1, a01); \
				a02 = _mm512_fmadd_ps(x, b2, a02); a03 = _mm512_fmadd_ps(x, b3, a03); \
				x = _mm512_maskz_loadu_ps(m, x1 + k);                               \
				a10 = _mm512_fmadd_ps(x, b0, a10); a11 = _mm512_fmadd_ps(x, b1, a11); \
				a12 = _mm512_fmadd_ps(x, b2, a12); a13 = _mm512_fmadd_ps(x, b3, a13); \
				x = _mm512_maskz_loadu_ps(m, x2 + k);                               \
				a20 = _mm512_fmadd_ps(x, b0, a20); a21 = _mm512_fmadd_ps(x, b1, a21); \
				a22 = _mm512_fmadd_ps(x, b2, a22); a23 = _mm512_fmadd_ps(x, b3, a23); \
				x = _mm512_maskz_loadu_ps(m, x3 + k);                               \
				a30 = _mm512_fmadd_ps(x, b0, a30); a31 = _mm512_fmadd_ps(x, b1, a31); \
				a32 = _mm512_fmadd_ps(x, b2, a32); a33 = _mm512_fmadd_ps(x, b3, a33); \
			}                                                                      \
			float *r = out + i * ldo + o;                                          \
			r[0] = _mm512_reduce_add_ps(a00); r[1] = _mm512_reduce_add_ps(a01);     \
			r[2] = _mm512_reduce_add_ps(a02); r[3] = _mm512_reduce_add_ps(a03);     \
			r += ldo;                                                              \
			r[0] = _mm512_reduce_add_ps(a10); r[1] = _mm512_reduce_add_ps(a11);     \
			r[2] = _mm512_reduce_add_ps(a12); r[3] = _mm512_reduce_add_ps(a13);     \
			r += ldo;                                                              \
			r[0] = _mm512_reduce_add_ps(a20); r[1] = _mm512_reduce_add_ps(a21);     \
			r[2] = _mm512_reduce_add_ps(a22); r[3] = _mm512_reduce_add_ps(a23);     \
			r += ldo;                                                              \
			r[0] = _mm512_reduce_add_ps(a30); r[1] = _mm512_reduce_add_ps(a31);     \
			r[2] = _mm512_reduce_add_ps(a32); r[3] = _mm512_reduce_add_ps(a33);     \
		}                                                                          \
		for (; i < n; i++) {                                                       \
			const float *x0 = x + i * ldx;                                         \
			__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;            \
			for (long k = 0; k <= kfull; k += 16) {                                \
				__mmask16 m = k < kfull ? (__mmask16)0xffff : tail;                 \
				if (!m) break;                                                     \
				__m512 x = _mm512_maskz_loadu_ps(m, x0 + k);                        \
				a0 = _mm512_fmadd_ps(x, LD(w0 + k, m), a0);                         \
				a1 = _mm512_fmadd_ps(x, LD(w1 + k, m), a1);                         \
				a2 = _mm512_fmadd_ps(x, LD(w2 + k, m), a2);                         \
				a3 = _mm512_fmadd_ps(x, LD(w3 + k, m), a3);                         \
			}                                                                      \
			float *r = out + i * ldo + o;                                          \
			r[0] = _mm512_reduce_add_ps(a0); r[1] = _mm512_reduce_add_ps(a1);       \
			r[2] = _mm512_reduce_add_ps(a2); r[3] = _mm512_reduce_add_ps(a3);       \
		}                                                                          \
	}                                                                              \
	for (; o < o1; o++) {                                                          \
		const WT *w0 = w + o * K;                                                  \
		for (long i = 0; i < n; i++) {                                             \
			const float *x0 = x + i * ldx;                                         \
			__m512 a0 = _mm512_setzero_ps();                                       \
			for (long k = 0; k <= kfull; k += 16) {                                \
				__mmask16 m = k < kfull ? (__mmask16)0xffff : tail;                 \
				if (!m) break;                                                     \
				a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x0 + k),              \
				                     LD(w0 + k, m), a0);                           \
			}                                                                      \
			out[i * ldo + o] = _mm512_reduce_add_ps(a0);                           \
		}                                                                          \
	}                                                                              \
}

KT_MM(kt_mm_f32_avx512, ld_f32, float)
KT_MM(kt_mm_bf16_avx512, ld_bf16, uint16_t)
KT_MM(kt_mm_f16_avx512, ld_f16, uint16_t)

/* dot product of two f32 vectors */
KT_AVX512 float kt_dot_avx512(const float *a, const float *b, long n) {
	__m512 acc = _mm512_setzero_ps();
	long k = 0;
	for (; k + 16 <= n; k += 16)
		acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
	if (k < n) {
		__mmask16 m = (__mmask16)((1u << (n - k)) - 1);
		acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc);
	}
	return _mm512_reduce_add_ps(acc);
}

/* y += a * x */
KT_AVX512 void kt_axpy_avx512(float *y, const float *x, float a, long n) {
	__m512 va = _mm512_set1_ps(a);
	long k = 0;
	for (; k + 16 <= n; k += 16)
		_mm512_storeu_ps(y + k, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + k), _mm512_loadu_ps(y + k)));
	if (k < n) {
		__mmask16 m = (__mmask16)((1u << (n - k)) - 1);
		_mm512_mask_storeu_ps(y + k, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + k), _mm512_maskz_loadu_ps(m, y + k)));
	}
}

/*
 * Causal attention of one token over npos cached positions, for heads
 * [h0,h1). q: [heads*hd]; caches [pages][pageSize][kvHeads][hd];
 * pages: page table; scores: scratch of npos floats; out: [heads*hd].
 */
KT_AVX512 void kt_attn_avx512(const float *q, const float *kc, const float *vc,
                              const int32_t *pages, long pageSize, long kvHeads,
                              long hd, long heads, long npos, float scale,
                              float *scores, float *out, long h0, long h1) {
	long group = heads / kvHeads;
	for (long h = h0; h < h1; h++) {
		long kvh = h / group;
		const float *qh = q + h * hd;
		float m = -INFINITY;
		for (long p = 0; p < npos; p++) {
			long base = (((long)pages[p / pageSize] * pageSize + p % pageSize) * kvHeads + kvh) * hd;
			float s = kt_dot_avx512(qh, kc + base, hd) * scale;
			scores[p] = s;
			if (s > m) m = s;
		}
		float sum = 0;
		for (long p = 0; p < npos; p++) {
			float e = expf(scores[p] - m);
			scores[p] = e;
			sum += e;
		}
		float *oh = out + h * hd;
		for (long d = 0; d < hd; d++) oh[d] = 0;
		float inv = 1.0f / sum;
		for (long p = 0; p < npos; p++) {
			long base = (((long)pages[p / pageSize] * pageSize + p % pageSize) * kvHeads + kvh) * hd;
			kt_axpy_avx512(oh, vc + base, scores[p] * inv, hd);
		}
	}
}

/* Sum of n floats (a streaming-read bandwidth probe). */
KT_AVX512 float kt_sum_avx512(const float *a, long n) {
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
	long k = 0;
	for (; k + 64 <= n; k += 64) {
		s0 = _mm512_add_ps(s0, _mm512_loadu_ps(a + k));
		s1 = _mm512_add_ps(s1, _mm512_loadu_ps(a + k + 16));
		s2 = _mm512_add_ps(s2, _mm512_loadu_ps(a + k + 32));
		s3 = _mm512_add_ps(s3, _mm512_loadu_ps(a + k + 48));
	}
	float r = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
	for (; k < n; k++) r += a[k];
	return r;
}
