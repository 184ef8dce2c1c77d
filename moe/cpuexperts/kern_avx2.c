// kern_avx2.c: AVX2+FMA kernels, the floor every supported CPU has. Each
// function carries its own target attribute.
#include <immintrin.h>
#include <math.h>

#include "kt_internal.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline))

INL T2 float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---------------------------------------------------------------- bf16 panels

// pf > 0 (every body below): the panel, one contiguous stream, is
// prefetched pf bytes ahead; the drivers pass it for a panel's first pass
// over the tokens only (later passes find it in the caches), as the AVX-512
// kernels do.
INL T2 void bf16pk_body(const uint32_t* pan, int k, const float* const* x, float* const* c, const int MT, int pf) {
  const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
  __m256 a0[4], a1[4];
  for (int t = 0; t < MT; t++) a0[t] = a1[t] = _mm256_setzero_ps();
  for (int j = 0; j < k / 2; j++) {
    if (pf > 0) _mm_prefetch((const char*)(pan + (int64_t)j * 16) + pf, _MM_HINT_T0);
    __m256i v0 = _mm256_loadu_si256((const __m256i*)(pan + (int64_t)j * 16));
    __m256i v1 = _mm256_loadu_si256((const __m256i*)(pan + (int64_t)j * 16 + 8));
    __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), o0 = _mm256_castsi256_ps(_mm256_and_si256(v0, hi));
    __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), o1 = _mm256_castsi256_ps(_mm256_and_si256(v1, hi));
    for (int t = 0; t < MT; t++) {
      __m256 xe = _mm256_set1_ps(x[t][2 * j]), xo = _mm256_set1_ps(x[t][2 * j + 1]);
      a0[t] = _mm256_fmadd_ps(o0, xo, _mm256_fmadd_ps(e0, xe, a0[t]));
      a1[t] = _mm256_fmadd_ps(o1, xo, _mm256_fmadd_ps(e1, xe, a1[t]));
    }
  }
  for (int t = 0; t < MT; t++) {
    _mm256_storeu_ps(c[t], a0[t]);
    _mm256_storeu_ps(c[t] + 8, a1[t]);
  }
}

T2 void kt_avx2_bf16pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                       kt_scratch* s) {
  int k = W->k, pf = s->dec_pf;
  const float* X = (const float*)A->a;
  for (int p = 0; p < nn / 16; p++) {
    const uint32_t* pan = (const uint32_t*)W->w + (int64_t)(n0 / 16 + p) * 8 * k;
    for (int t0 = 0; t0 < m; t0 += 4) {
      int mt = m - t0 < 4 ? m - t0 : 4;
      const float* x[4];
      float* c[4];
      float dummy[16];
      for (int t = 0; t < 4; t++) {
        x[t] = X + (int64_t)(t0 + (t < mt ? t : 0)) * A->ld;
        c[t] = t < mt ? C + (int64_t)(t0 + t) * ldc + p * 16 : dummy;
      }
      int pft = t0 == 0 ? pf : 0;
      if (mt == 1)
        bf16pk_body(pan, k, x, c, 1, pft);
      else if (mt == 2)
        bf16pk_body(pan, k, x, c, 2, pft);
      else
        bf16pk_body(pan, k, x, c, 4, pft);
    }
  }
}

// ---------------------------------------------------------------- int8 / int4 panels
// s8 x s8 through vpmaddubsw with the sign trick: |w| (u8) * sign(x, w) (s8).
// |w| <= 128 and |x| <= 127, so a pair sum never saturates int16.

INL T2 __m256i dot4(__m256i w, int32_t xq) {
  __m256i xb = _mm256_set1_epi32(xq);
  // a weight of -128 (int4 code -8 as q*16) has no positive twin: w's
  // magnitude goes unsigned, the activation takes its sign
  __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xb, w));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

INL T2 void i8pk_body(const int8_t* pan, int k, const int32_t* const* x, __m256i* a0, __m256i* a1, const int MT,
                      int pf) {
  for (int t = 0; t < MT; t++) a0[t] = a1[t] = _mm256_setzero_si256();
  for (int j = 0; j < k / 4; j++) {
    if (pf > 0) _mm_prefetch((const char*)pan + (int64_t)j * 64 + pf, _MM_HINT_T0);
    __m256i w0 = _mm256_loadu_si256((const __m256i*)(pan + (int64_t)j * 64));
    __m256i w1 = _mm256_loadu_si256((const __m256i*)(pan + (int64_t)j * 64 + 32));
    for (int t = 0; t < MT; t++) {
      a0[t] = _mm256_add_epi32(a0[t], dot4(w0, x[t][j]));
      a1[t] = _mm256_add_epi32(a1[t], dot4(w1, x[t][j]));
    }
  }
}

INL T2 void i4pk_body(const uint8_t* pan, int k, const int32_t* const* x, __m256i* a0, __m256i* a1, const int MT,
                      int pf) {
  const __m256i mask = _mm256_set1_epi8((char)0xf0);
  for (int t = 0; t < MT; t++) a0[t] = a1[t] = _mm256_setzero_si256();
  for (int c = 0; c < k / 128; c++) {
    for (int r = 0; r < 16; r++) {
      const uint8_t* l = pan + ((int64_t)c * 16 + r) * 64;
      if (pf > 0) _mm_prefetch((const char*)l + pf, _MM_HINT_T0);
      __m256i b0 = _mm256_loadu_si256((const __m256i*)l), b1 = _mm256_loadu_si256((const __m256i*)(l + 32));
      __m256i lo0 = _mm256_and_si256(_mm256_slli_epi16(b0, 4), mask), hi0 = _mm256_and_si256(b0, mask);
      __m256i lo1 = _mm256_and_si256(_mm256_slli_epi16(b1, 4), mask), hi1 = _mm256_and_si256(b1, mask);
      for (int t = 0; t < MT; t++) {
        int32_t xl = x[t][32 * c + r], xh = x[t][32 * c + 16 + r];
        a0[t] = _mm256_add_epi32(a0[t], _mm256_add_epi32(dot4(lo0, xl), dot4(hi0, xh)));
        a1[t] = _mm256_add_epi32(a1[t], _mm256_add_epi32(dot4(lo1, xl), dot4(hi1, xh)));
      }
    }
  }
}

#define INT2_DRIVER(NAME, BODY, PANEL_BYTES)                                                            \
  T2 void NAME(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,              \
               kt_scratch* s) {                                                                         \
    int k = W->k, pf = s->dec_pf;                                                                       \
    const int8_t* X = (const int8_t*)A->a;                                                              \
    for (int p = 0; p < nn / 16; p++) {                                                                 \
      int row = n0 + p * 16;                                                                            \
      const void* pan = W->w + (int64_t)(row / 16) * (PANEL_BYTES);                                     \
      __m256 ws0 = _mm256_loadu_ps(W->scale + row), ws1 = _mm256_loadu_ps(W->scale + row + 8);          \
      for (int t0 = 0; t0 < m; t0 += 4) {                                                               \
        int mt = m - t0 < 4 ? m - t0 : 4;                                                               \
        const int32_t* x[4];                                                                            \
        __m256i a0[4], a1[4];                                                                           \
        for (int t = 0; t < 4; t++) x[t] = (const int32_t*)(X + (int64_t)(t0 + (t < mt ? t : 0)) * A->ld); \
        int pft = t0 == 0 ? pf : 0;                                                                     \
        if (mt == 1)                                                                                    \
          BODY(pan, k, x, a0, a1, 1, pft);                                                              \
        else if (mt == 2)                                                                               \
          BODY(pan, k, x, a0, a1, 2, pft);                                                              \
        else                                                                                            \
          BODY(pan, k, x, a0, a1, 4, pft);                                                              \
        for (int t = 0; t < mt; t++) {                                                                  \
          __m256 as = _mm256_set1_ps(A->as[t0 + t]);                                                    \
          float* c = C + (int64_t)(t0 + t) * ldc + p * 16;                                              \
          _mm256_storeu_ps(c, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a0[t]), ws0), as));        \
          _mm256_storeu_ps(c + 8, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a1[t]), ws1), as));    \
        }                                                                                               \
      }                                                                                                 \
    }                                                                                                   \
  }

INT2_DRIVER(kt_avx2_i8pk, i8pk_body, 16 * k)
INT2_DRIVER(kt_avx2_i4pk, i4pk_body, 8 * k)

// ld_bf16x8 widens 8 bf16 values to f32.
INL T2 __m256 ld_bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}

// kt_gsum: each group's runs of 32 int8 activations summed by vpsadbw over
// the bytes flipped to unsigned, less 128 a byte.
T2 void kt_gsum(const int8_t* x, int64_t ld, int m, int k, int group, int32_t* out) {
  const __m256i flip = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
  for (int t = 0; t < m; t++)
    for (int g = 0; g < k / group; g++) {
      __m256i v = zero;
      for (int j = g * group; j < (g + 1) * group; j += 32)
        v = _mm256_add_epi64(v, _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(x + (int64_t)t * ld + j)), flip), zero));
      __m128i h = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
      out[(int64_t)t * (k / group) + g] = (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - group * 128;
    }
}

// dotu4 is one k-quad of 8 rows: unsigned 4-bit codes (bytes 0..15) times
// the four int8 activations of xq, exact (pair sums far below int16's limit).
INL T2 __m256i dotu4(__m256i u, int32_t xq) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_set1_epi32(xq)), _mm256_set1_epi16(1));
}

// Group-wise int4 (AVX2; groups of 32, 64 or 128 columns): one token at a
// time per panel half-pair. The panels hold unsigned codes u = v + 8: each
// group's Σ u·x (a 32-column quarter of a 128-column block, or halves or
// the whole block, added as integers) less 8 times the activations' sum
// over it (kt_gsum) is Σ v·x, scaled into f32 (the bf16 scales are per
// 16 v, so the sums are taken 16 times). The first token's pass prefetches
// the panel dec_pf bytes ahead and the group scales (32 bytes per group) two
// 128-column blocks ahead, as the VNNI kernel does.
T2 void kt_avx2_i4gpk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                      kt_scratch* s) {
  int k = W->k, ng = k / W->group, gb = 128 / W->group, q32 = W->group / 32;
  const __m256i low = _mm256_set1_epi8(0x0f);
  const int8_t* X = (const int8_t*)A->a;
  for (int c0 = 0; c0 < m; c0 += KT_GSUM_TOK) {
    int mc = m - c0 < KT_GSUM_TOK ? m - c0 : KT_GSUM_TOK;
    kt_gsum(X + (int64_t)c0 * A->ld, A->ld, mc, k, W->group, s->gsum);
    for (int p = 0; p < nn / 16; p++) {
      int pi = n0 / 16 + p;
      const uint8_t* pan = W->w + (int64_t)pi * 8 * k;
      const uint16_t* sc = W->gscale + (int64_t)pi * ng * 16;
      for (int t = 0; t < mc; t++) {
        const int32_t* x = (const int32_t*)(X + (int64_t)(c0 + t) * A->ld);
        const int32_t* gs = s->gsum + (int64_t)t * ng;
        int pf = c0 == 0 && t == 0 ? s->dec_pf : 0;
        __m256 f0 = _mm256_setzero_ps(), f1 = _mm256_setzero_ps();
        if (pf > 0) kt_pf_gscales(sc, 0, 2 * gb < ng ? 2 * gb : ng);
        for (int c = 0; c < k / 128; c++) {
          // a[j][0] rows 0-7 and a[j][1] rows 8-15 of quarter j: the low
          // nibbles of lines 0-7 (j 0) and 8-15 (j 1), the high ones (2, 3);
          // with groups of 64 or more the halves (0 and 2) take all
          __m256i a[4][2];
          for (int j = 0; j < 4; j++) a[j][0] = a[j][1] = _mm256_setzero_si256();
          if (pf > 0 && c + 2 < k / 128) kt_pf_gscales(sc, (int64_t)(c + 2) * gb, (int64_t)(c + 3) * gb);
          for (int r = 0; r < 16; r++) {
            const uint8_t* l = pan + ((int64_t)c * 16 + r) * 64;
            if (pf > 0) _mm_prefetch((const char*)l + pf, _MM_HINT_T0);
            __m256i b0 = _mm256_loadu_si256((const __m256i*)l), b1 = _mm256_loadu_si256((const __m256i*)(l + 32));
            int32_t xl = x[32 * c + r], xh = x[32 * c + 16 + r];
            int h = q32 == 1 ? r >> 3 : 0;
            a[h][0] = _mm256_add_epi32(a[h][0], dotu4(_mm256_and_si256(b0, low), xl));
            a[h][1] = _mm256_add_epi32(a[h][1], dotu4(_mm256_and_si256(b1, low), xl));
            a[2 + h][0] = _mm256_add_epi32(a[2 + h][0], dotu4(_mm256_and_si256(_mm256_srli_epi16(b0, 4), low), xh));
            a[2 + h][1] = _mm256_add_epi32(a[2 + h][1], dotu4(_mm256_and_si256(_mm256_srli_epi16(b1, 4), low), xh));
          }
          for (int j = 0; j < 4; j += q32) {
            __m256i s0 = a[j][0], s1 = a[j][1];
            for (int i = 1; i < q32; i++) {
              s0 = _mm256_add_epi32(s0, a[j + i][0]);
              s1 = _mm256_add_epi32(s1, a[j + i][1]);
            }
            int gi = (128 * c + 32 * j) / W->group;
            __m256i off = _mm256_set1_epi32(8 * gs[gi]);
            s0 = _mm256_sub_epi32(s0, off);
            s1 = _mm256_sub_epi32(s1, off);
            const uint16_t* g = sc + (int64_t)gi * 16;
            f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_slli_epi32(s0, 4)), ld_bf16x8(g), f0);
            f1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_slli_epi32(s1, 4)), ld_bf16x8(g + 8), f1);
          }
        }
        __m256 as = _mm256_set1_ps(A->as[c0 + t]);
        float* o = C + (int64_t)(c0 + t) * ldc + p * 16;
        _mm256_storeu_ps(o, _mm256_mul_ps(f0, as));
        _mm256_storeu_ps(o + 8, _mm256_mul_ps(f1, as));
      }
    }
  }
}

// ---------------------------------------------------------------- row-major bf16 / fp8

INL T2 __m256 ld_fp8x8(const uint8_t* p) {
  __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p));
  __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7f)), 20),
                                 _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24));
  return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
}

INL T2 void rm2_body(const kt_mat* W, int row, const float* const* x, float* const* c, const int MT, const int FP8) {
  int k = W->k;
  __m256 a0[4], a1[4];
  for (int t = 0; t < MT; t++) a0[t] = a1[t] = _mm256_setzero_ps();
  const float* s0 = NULL;
  if (FP8) s0 = W->scale + (int64_t)((W->row0 + row) / 128) * W->sld;
  for (int kk = 0; kk < k; kk += 8) {
    __m256 w0, w1;
    if (FP8) {
      const uint8_t* r0 = W->w + (int64_t)row * W->ld + kk;
      __m256 sv = _mm256_set1_ps(s0[(W->col0 + kk) / 128]);
      w0 = _mm256_mul_ps(ld_fp8x8(r0), sv);
      w1 = _mm256_mul_ps(ld_fp8x8(r0 + W->ld), sv);
    } else {
      const uint16_t* r0 = (const uint16_t*)W->w + (int64_t)row * W->ld + kk;
      w0 = ld_bf16x8(r0);
      w1 = ld_bf16x8(r0 + W->ld);
    }
    for (int t = 0; t < MT; t++) {
      __m256 xv = _mm256_loadu_ps(x[t] + kk);
      a0[t] = _mm256_fmadd_ps(w0, xv, a0[t]);
      a1[t] = _mm256_fmadd_ps(w1, xv, a1[t]);
    }
  }
  for (int t = 0; t < MT; t++) {
    c[t][0] = hsum8(a0[t]);
    c[t][1] = hsum8(a1[t]);
  }
}

#define RM2_DRIVER(NAME, FP8)                                                                           \
  T2 void NAME(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,              \
               kt_scratch* s) {                                                                         \
    (void)s;                                                                                            \
    for (int t0 = 0; t0 < m; t0 += 4) {                                                                 \
      int mt = m - t0 < 4 ? m - t0 : 4;                                                                 \
      const float* x[4];                                                                                \
      for (int t = 0; t < 4; t++) x[t] = (const float*)A->a + (int64_t)(t0 + (t < mt ? t : 0)) * A->ld; \
      for (int j = 0; j < nn; j += 2) {                                                                 \
        float* c[4];                                                                                    \
        float dummy[2];                                                                                 \
        for (int t = 0; t < 4; t++) c[t] = t < mt ? C + (int64_t)(t0 + t) * ldc + j : dummy;           \
        if (mt == 1)                                                                                    \
          rm2_body(W, n0 + j, x, c, 1, FP8);                                                            \
        else if (mt == 2)                                                                               \
          rm2_body(W, n0 + j, x, c, 2, FP8);                                                            \
        else                                                                                            \
          rm2_body(W, n0 + j, x, c, 4, FP8);                                                            \
      }                                                                                                 \
    }                                                                                                   \
  }

RM2_DRIVER(kt_avx2_bf16rm, 0)
RM2_DRIVER(kt_avx2_fp8rm, 1)

// ---------------------------------------------------------------- conversions

#define KT_CONVERT_BODY 1
#define KT_CONV_VEC 256
#define KT_CONV_ATTR T2
#define CONV(name) kt_avx2_##name
#include "convert.h"
#undef CONV
#undef KT_CONV_VEC
#undef KT_CONV_ATTR

// ---------------------------------------------------------------- activation

INL T2 __m256 exp256(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-88.0f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n for n in [-127, 127]: split in two halves to stay in range
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i h1 = _mm256_srai_epi32(ni, 1), h2 = _mm256_sub_epi32(ni, h1);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, _mm256_set1_epi32(127)), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

T2 void kt_avx2_silu_mul(const float* g, const float* u, float* h, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i);
    __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    __m256 sg = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(h + i, _mm256_mul_ps(sg, _mm256_loadu_ps(u + i)));
  }
  for (; i < n; i++) h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

T2 uint64_t kt_avx2_sum_bytes(const void* p, int64_t bytes) {
  const char* c = (const char*)p;
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i*)(c + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i*)(c + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i*)(c + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i*)(c + i + 96)));
  }
  a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}
