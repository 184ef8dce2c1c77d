#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <math.h>
#include "deltanet.h"

#if defined(__x86_64__)
#define GDN_HAVE_AVX512 1
#define GDN_TARGET __attribute__((target("avx512f,avx512vl,avx512dq,fma")))
#define GDN_NAME(x) gdn_avx512_##x
#define GDN_AVX512 1
#include "deltanet_kern.h"
#undef GDN_TARGET
#undef GDN_NAME
#undef GDN_AVX512
#endif

#define GDN_TARGET
#define GDN_NAME(x) gdn_generic_##x
#define GDN_AVX512 0
#include "deltanet_kern.h"

void gdn_group(int isa, int nkh, int nvh, int dk, int dv, float *S, float *K, float *V, float *G,
	const float *q, const float *k, const float *v, long ldqk, long ldv, const float *g, const float *beta,
	int n, int kh, int rows0, float *out, float *scratch) {
	gdn_shape sh = {nkh, nvh, dk, dv};
	gdn_state st = {S, K, V, G};
#ifdef GDN_HAVE_AVX512
	if (isa == 1)
		gdn_avx512_group(&sh, &st, q, k, v, (size_t)ldqk, (size_t)ldv, g, beta, n, kh, rows0, out, scratch);
	else
#endif
		gdn_generic_group(&sh, &st, q, k, v, (size_t)ldqk, (size_t)ldv, g, beta, n, kh, rows0, out, scratch);
}

void gdn_materialize(int isa, int nkh, int nvh, int dk, int dv, float *S, float *K, float *V, float *G, int rows, float *dec) {
	gdn_shape sh = {nkh, nvh, dk, dv};
	gdn_state st = {S, K, V, G};
	int rep = nvh / nkh;
	for (int kh = 0; kh < nkh; kh++)
		for (int r = 0; r < rep; r++) {
#ifdef GDN_HAVE_AVX512
			if (isa == 1)
				gdn_avx512_flush(&sh, &st, kh, kh * rep + r, rows, dec);
			else
#endif
				gdn_generic_flush(&sh, &st, kh, kh * rep + r, rows, dec);
		}
}
