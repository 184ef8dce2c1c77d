// vecmath.c: AVX-512 and AVX2 loops over float32 rows for the sampler
// (max, x·s in place with its max, e^(x-max) in place, the float64 sum
// of e^(x-max), whole or per block, and the indices of the values at or
// above a threshold). Each
// function is compiled for its ISA with a target attribute and chosen at
// run time; the scalar loops in Go are the reference (vecmath_test.go).
// Products and sums are rounded one by one (no fused multiply-add), so
// every version gives the Go reference's float32 values.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "vecmath.h"

#define T512 __attribute__((target("avx512f")))
#define T256 __attribute__((target("avx2,fma")))

int vm_level(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
  return 0;
}

// The same arithmetic as the Go reference: n = trunc(x*log2e - 0.5) (x <= 0),
// r = x - n*ln2hi - n*ln2lo, p = degree-6 Taylor of e^r (Estrin), times 2^n;
// 0 where x < -87.33 or x is NaN.
#define LOG2E 1.44269504088896341f
#define LN2HI 0.693145751953125f
#define LN2LO 1.42860682030941723212e-6f

static T512 inline __m512 exp512(__m512 x) {
  __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_GE_OQ);
  __m512 t = _mm512_sub_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), _mm512_set1_ps(0.5f));
  __m512i ni = _mm512_cvttps_epi32(t);
  __m512 n = _mm512_cvtepi32_ps(ni);
  __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(LN2HI))), _mm512_mul_ps(n, _mm512_set1_ps(LN2LO)));
  __m512 r2 = _mm512_mul_ps(r, r);
  __m512 p01 = _mm512_add_ps(_mm512_set1_ps(1.0f), r);
  __m512 p23 = _mm512_add_ps(_mm512_set1_ps(0.5f), _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 6)));
  __m512 p45 = _mm512_add_ps(_mm512_set1_ps(1.0f / 24), _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 120)));
  __m512 p6 = _mm512_set1_ps(1.0f / 720);
  __m512 p = _mm512_add_ps(p01, _mm512_mul_ps(r2, _mm512_add_ps(p23, _mm512_mul_ps(r2, _mm512_add_ps(p45, _mm512_mul_ps(r2, p6))))));
  __m512i e = _mm512_slli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  return _mm512_maskz_mov_ps(ok, y);
}

static T256 inline __m256 exp256(__m256 x) {
  __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_GE_OQ);
  __m256 t = _mm256_sub_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _mm256_set1_ps(0.5f));
  __m256i ni = _mm256_cvttps_epi32(t);
  __m256 n = _mm256_cvtepi32_ps(ni);
  __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(LN2HI))), _mm256_mul_ps(n, _mm256_set1_ps(LN2LO)));
  __m256 r2 = _mm256_mul_ps(r, r);
  __m256 p01 = _mm256_add_ps(_mm256_set1_ps(1.0f), r);
  __m256 p23 = _mm256_add_ps(_mm256_set1_ps(0.5f), _mm256_mul_ps(r, _mm256_set1_ps(1.0f / 6)));
  __m256 p45 = _mm256_add_ps(_mm256_set1_ps(1.0f / 24), _mm256_mul_ps(r, _mm256_set1_ps(1.0f / 120)));
  __m256 p6 = _mm256_set1_ps(1.0f / 720);
  __m256 p = _mm256_add_ps(p01, _mm256_mul_ps(r2, _mm256_add_ps(p23, _mm256_mul_ps(r2, _mm256_add_ps(p45, _mm256_mul_ps(r2, p6))))));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_and_ps(y, ok);
}

// Scalar tail, the same arithmetic.
static inline float exp1(float x) {
  if (!(x >= -87.33f)) return 0;
  int32_t ni = (int32_t)(x * LOG2E - 0.5f);
  float n = (float)ni;
  float r = x - n * LN2HI - n * LN2LO;
  float r2 = r * r;
  float p = (1 + r) + r2 * ((0.5f + r * (1.0f / 6)) + r2 * ((1.0f / 24 + r * (1.0f / 120)) + r2 * (1.0f / 720)));
  union { uint32_t u; float f; } s = {.u = (uint32_t)(ni + 127) << 23};
  return p * s.f;
}

static T512 float max512(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);  // NaN lanes keep m
  float r = _mm512_reduce_max_ps(m);
  for (; i < n; i++)
    if (x[i] > r) r = x[i];
  return r;
}

static T256 float max256(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
  float b[8];
  _mm256_storeu_ps(b, m);
  float r = b[0];
  for (int k = 1; k < 8; k++)
    if (b[k] > r) r = b[k];
  for (; i < n; i++)
    if (x[i] > r) r = x[i];
  return r;
}

float vm_max(int level, const float* x, int64_t n) {
  if (level >= 2) return max512(x, n);
  return max256(x, n);
}

static T512 double sumexp512(float* x, int64_t n, float mx, int store) {
  __m512 vm = _mm512_set1_ps(mx);
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 y = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    if (store) _mm512_storeu_ps(x + i, y);
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(y)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(y), 1))));
  }
  double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
  for (; i < n; i++) {
    float y = exp1(x[i] - mx);
    if (store) x[i] = y;
    s += y;
  }
  return s;
}

static T256 double sumexp256(float* x, int64_t n, float mx, int store) {
  __m256 vm = _mm256_set1_ps(mx);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    if (store) _mm256_storeu_ps(x + i, y);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
  }
  double b[4];
  _mm256_storeu_pd(b, _mm256_add_pd(a0, a1));
  double s = b[0] + b[1] + b[2] + b[3];
  for (; i < n; i++) {
    float y = exp1(x[i] - mx);
    if (store) x[i] = y;
    s += y;
  }
  return s;
}

double vm_sumexp(int level, float* x, int64_t n, float mx, int store) {
  if (level >= 2) return sumexp512(x, n, mx, store);
  return sumexp256(x, n, mx, store);
}

static T512 float scalemax512(float* x, int64_t n, float s) {
  __m512 vs = _mm512_set1_ps(s), m = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
    _mm512_storeu_ps(x + i, y);
    m = _mm512_max_ps(y, m);  // NaN lanes keep m
  }
  float r = _mm512_reduce_max_ps(m);
  for (; i < n; i++) {
    x[i] *= s;
    if (x[i] > r) r = x[i];
  }
  return r;
}

static T256 float scalemax256(float* x, int64_t n, float s) {
  __m256 vs = _mm256_set1_ps(s), m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(x + i, y);
    m = _mm256_max_ps(y, m);
  }
  float b[8];
  _mm256_storeu_ps(b, m);
  float r = b[0];
  for (int k = 1; k < 8; k++)
    if (b[k] > r) r = b[k];
  for (; i < n; i++) {
    x[i] *= s;
    if (x[i] > r) r = x[i];
  }
  return r;
}

// vm_scalemax multiplies x by s in place and returns the largest product
// (NaNs skipped).
float vm_scalemax(int level, float* x, int64_t n, float s) {
  if (level >= 2) return scalemax512(x, n, s);
  return scalemax256(x, n, s);
}

// vm_expblocks sets x[i] = e^(x[i]-mx), stores the float64 sum of each
// block of bs values in out (the last block may be shorter) and returns
// the sum of the block sums, in block order.
double vm_expblocks(int level, float* x, int64_t n, float mx, int64_t bs, double* out) {
  double total = 0;
  for (int64_t b0 = 0, k = 0; b0 < n; b0 += bs, k++) {
    int64_t m = n - b0 < bs ? n - b0 : bs;
    double s = level >= 2 ? sumexp512(x + b0, m, mx, 1) : sumexp256(x + b0, m, mx, 1);
    out[k] = s;
    total += s;
  }
  return total;
}

static T512 int64_t above512(const float* x, int64_t n, float thr, int32_t* out) {
  __m512 vt = _mm512_set1_ps(thr);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), step = _mm512_set1_epi32(16);
  int64_t k = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vt, _CMP_GE_OQ);
    if (m) {
      _mm512_mask_compressstoreu_epi32(out + k, m, idx);
      k += __builtin_popcount(m);
    }
    idx = _mm512_add_epi32(idx, step);
  }
  for (; i < n; i++)
    if (x[i] >= thr) out[k++] = (int32_t)i;
  return k;
}

static T256 int64_t above256(const float* x, int64_t n, float thr, int32_t* out) {
  __m256 vt = _mm256_set1_ps(thr);
  int64_t k = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vt, _CMP_GE_OQ));
    while (m) {
      int j = __builtin_ctz(m);
      out[k++] = (int32_t)(i + j);
      m &= m - 1;
    }
  }
  for (; i < n; i++)
    if (x[i] >= thr) out[k++] = (int32_t)i;
  return k;
}

// vm_above writes the indices of the values >= thr (not NaN) to out, in
// order, and returns how many; out has room for n.
int64_t vm_above(int level, const float* x, int64_t n, float thr, int32_t* out) {
  if (level >= 2) return above512(x, n, thr, out);
  return above256(x, n, thr, out);
}
