// Declarations of the C kernels of the CPU backend (see kernels_amd64.c).
#include <stdint.h>

void kt_mm_f32_avx512(const float *x, long ldx, long n, const void *w, long K, long o0, long o1, float *out, long ldo);
void kt_mm_bf16_avx512(const float *x, long ldx, long n, const void *w, long K, long o0, long o1, float *out, long ldo);
void kt_mm_f16_avx512(const float *x, long ldx, long n, const void *w, long K, long o0, long o1, float *out, long ldo);
float kt_dot_avx512(const float *a, const float *b, long n);
void kt_axpy_avx512(float *y, const float *x, float a, long n);
void kt_attn_avx512(const float *q, const float *kc, const float *vc, const int32_t *pages, long pageSize, long kvHeads, long hd, long heads, long npos, float scale, float *scores, float *out, long h0, long h1);
float kt_sum_avx512(const float *a, long n);
void kt_fp8_dequant_avx512(const uint8_t *q, const float *cs, long K, float *dst);
