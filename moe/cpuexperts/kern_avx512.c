// kern_avx512.c: AVX-512 kernels (F/BW/VL/DQ, VNNI, BF16). Every function
// carries its own target attribute; the file is compiled without -m flags and
// only called after CPUID said the instructions exist.
#include <immintrin.h>
#include <math.h>

#include "kt_internal.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx2,f16c")))
#define TVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,avx2")))
#define TBF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,avx2")))
#define INL static inline __attribute__((always_inline))

// ---------------------------------------------------------------- bf16 panels

INL T512 void bf16pk_f32(const uint32_t* pan, int k, const float* const* x, float* const* c, const int MT) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  __m512 acc[8];
  for (int t = 0; t < MT; t++) acc[t] = _mm512_setzero_ps();
  for (int j = 0; j < k / 2; j++) {
    __m512i wv = _mm512_loadu_si512(pan + (int64_t)j * 16);
    __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
    __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(wv, hi));
    for (int t = 0; t < MT; t++) {
      acc[t] = _mm512_fmadd_ps(we, _mm512_set1_ps(x[t][2 * j]), acc[t]);
      acc[t] = _mm512_fmadd_ps(wo, _mm512_set1_ps(x[t][2 * j + 1]), acc[t]);
    }
  }
  for (int t = 0; t < MT; t++) _mm512_storeu_ps(c[t], acc[t]);
}

T512 void kt_avx512_bf16pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                           kt_scratch* s) {
  (void)s;
  int k = W->k;
  const float* X = (const float*)A->a;
  for (int p = 0; p < nn / 16; p++) {
    const uint32_t* pan = (const uint32_t*)W->w + (int64_t)(n0 / 16 + p) * 8 * k;
    for (int t0 = 0; t0 < m; t0 += KT_DEC_M) {
      int mt = m - t0 < KT_DEC_M ? m - t0 : KT_DEC_M;
      const float* x[8];
      float* c[8];
      float dummy[16];
      for (int t = 0; t < 8; t++) {
        x[t] = X + (int64_t)(t0 + (t < mt ? t : 0)) * A->ld;
        c[t] = t < mt ? C + (int64_t)(t0 + t) * ldc + p * 16 : dummy;
      }
      if (mt == 1)
        bf16pk_f32(pan, k, x, c, 1);
      else if (mt == 2)
        bf16pk_f32(pan, k, x, c, 2);
      else if (mt <= 4)
        bf16pk_f32(pan, k, x, c, 4);
      else
        bf16pk_f32(pan, k, x, c, 8);
    }
  }
}

// pf > 0: the panel is prefetched pf bytes ahead (as the int kernels); the
// drivers pass it for a panel's first pass over the tokens only.
INL TBF16 void bf16pk_bf(const uint32_t* pan, int k, const uint32_t* const* x, float* const* c, const int MT, int pf) {
  __m512 acc[8];
  for (int t = 0; t < MT; t++) acc[t] = _mm512_setzero_ps();
  for (int j = 0; j < k / 2; j++) {
    if (pf > 0) _mm_prefetch((const char*)(pan + (int64_t)j * 16) + pf, _MM_HINT_T0);
    __m512bh wv = (__m512bh)_mm512_loadu_si512(pan + (int64_t)j * 16);
    for (int t = 0; t < MT; t++) acc[t] = _mm512_dpbf16_ps(acc[t], wv, (__m512bh)_mm512_set1_epi32((int)x[t][j]));
  }
  for (int t = 0; t < MT; t++) _mm512_storeu_ps(c[t], acc[t]);
}

TBF16 void kt_avx512bf16_bf16pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                                kt_scratch* s) {
  int k = W->k, pf = s->dec_pf;
  const uint16_t* X = (const uint16_t*)A->a;
  for (int p = 0; p < nn / 16; p++) {
    const uint32_t* pan = (const uint32_t*)W->w + (int64_t)(n0 / 16 + p) * 8 * k;
    for (int t0 = 0; t0 < m; t0 += KT_DEC_M) {
      int mt = m - t0 < KT_DEC_M ? m - t0 : KT_DEC_M;
      const uint32_t* x[8];
      float* c[8];
      float dummy[16];
      for (int t = 0; t < 8; t++) {
        x[t] = (const uint32_t*)(X + (int64_t)(t0 + (t < mt ? t : 0)) * A->ld);
        c[t] = t < mt ? C + (int64_t)(t0 + t) * ldc + p * 16 : dummy;
      }
      int pft = t0 == 0 ? pf : 0;  // later passes find the panel in the caches
      if (mt == 1)
        bf16pk_bf(pan, k, x, c, 1, pft);
      else if (mt == 2)
        bf16pk_bf(pan, k, x, c, 2, pft);
      else if (mt <= 4)
        bf16pk_bf(pan, k, x, c, 4, pft);
      else
        bf16pk_bf(pan, k, x, c, 8, pft);
    }
  }
}

// ---------------------------------------------------------------- int8 / int4 panels (VNNI)

// Result of an integer panel: C = (acc - corr) * wscale * ascale.
INL TVNNI void int_store(__m512i acc, __m512i corr, __m512 ws, float as, float* c) {
  __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, corr));
  _mm512_storeu_ps(c, _mm512_mul_ps(_mm512_mul_ps(f, ws), _mm512_set1_ps(as)));
}

// flip_words stores 16 words of int8 activations as the unsigned bytes
// vpdpbusd takes (each byte xor 0x80; the kernels subtract the row's
// correction): the one-token loops then broadcast each word straight from
// memory instead of spending a vector operation on it per 64-byte line.
INL TVNNI void flip_words(const int32_t* x, int32_t* d) {
  _mm512_storeu_si512(d, _mm512_xor_si512(_mm512_loadu_si512(x), _mm512_set1_epi32((int)0x80808080u)));
  // the words are read back from memory: a broadcast from memory is a load
  // alone, where the compiler would otherwise keep them in a register and
  // spend a shuffle and a broadcast on each
  __asm__ volatile("" : : "r"(d) : "memory");
}

// i4_one adds one 128-column block of an int4 panel (1 KiB at p: 16 lines,
// each the low and high nibbles of 16 rows) times one token's activations
// x[0..31] to the low- and high-nibble sums: four chains, two lines a step,
// so that with the panel in the caches (the hybrid step's prefetch) the
// 5-cycle multiply-add latency of two chains does not set the pace. Integer
// sums are exact: the same sums as one chain per nibble. pf > 0 prefetches
// the lines pf bytes ahead; a line of s's side stream per step (kt_side_pf).
INL TVNNI void i4_one(const uint8_t* p, const int32_t* x, int pf, kt_scratch* s, __m512i* lo, __m512i* hi) {
  const __m512i mask = _mm512_set1_epi8((char)0xf0);
  int32_t xf[32];
  flip_words(x, xf);
  flip_words(x + 16, xf + 16);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (int r = 0; r < 16; r += 2) {
    const uint8_t* q = p + r * 64;
    if (pf > 0) {
      _mm_prefetch((const char*)q + pf, _MM_HINT_T0);
      _mm_prefetch((const char*)q + 64 + pf, _MM_HINT_T0);
    }
    kt_side_pf(s);
    __m512i b0 = _mm512_loadu_si512(q), b1 = _mm512_loadu_si512(q + 64);
    a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(xf[r]), _mm512_and_si512(_mm512_slli_epi16(b0, 4), mask));
    a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(xf[16 + r]), _mm512_and_si512(b0, mask));
    a2 = _mm512_dpbusd_epi32(a2, _mm512_set1_epi32(xf[r + 1]), _mm512_and_si512(_mm512_slli_epi16(b1, 4), mask));
    a3 = _mm512_dpbusd_epi32(a3, _mm512_set1_epi32(xf[17 + r]), _mm512_and_si512(b1, mask));
  }
  *lo = _mm512_add_epi32(*lo, _mm512_add_epi32(a0, a2));
  *hi = _mm512_add_epi32(*hi, _mm512_add_epi32(a1, a3));
}

// i4_block adds 128-column block c of an int4 panel times MT tokens'
// activations x[t] to the low- and high-nibble sums lo[t] and hi[t]: one
// token through i4_one, several with each line unpacked once for all of
// them. The integer sums do not depend on the grouping.
INL TVNNI void i4_block(const uint8_t* pan, int c, const int32_t* const* x, const int MT, int pf, kt_scratch* s,
                        __m512i* lo, __m512i* hi) {
  const uint8_t* p = pan + (int64_t)c * 1024;
  if (MT == 1) {
    i4_one(p, x[0] + 32 * c, pf, s, &lo[0], &hi[0]);
    return;
  }
  const __m512i flip = _mm512_set1_epi32((int)0x80808080u);
  const __m512i mask = _mm512_set1_epi8((char)0xf0);
  for (int r = 0; r < 16; r++) {
    if (pf > 0) _mm_prefetch((const char*)p + r * 64 + pf, _MM_HINT_T0);
    __m512i b = _mm512_loadu_si512(p + r * 64);
    __m512i bl = _mm512_and_si512(_mm512_slli_epi16(b, 4), mask);
    __m512i bh = _mm512_and_si512(b, mask);
    for (int t = 0; t < MT; t++) {
      lo[t] = _mm512_dpbusd_epi32(lo[t], _mm512_xor_si512(_mm512_set1_epi32(x[t][32 * c + r]), flip), bl);
      hi[t] = _mm512_dpbusd_epi32(hi[t], _mm512_xor_si512(_mm512_set1_epi32(x[t][32 * c + 16 + r]), flip), bh);
    }
  }
}

// i4u_block adds 128-column block c of a group-wise int4 panel (unsigned
// codes u = v + 8) times MT tokens' int8 activations, as Σ 16u·x (the codes
// unsigned in vpdpbusd's first operand, the activations signed in its
// second), to the sums of the block's parts, each [t] per token. Halves
// (H 2: groups of 64 or 128): q[0] the low nibbles (columns 0-63 of the
// block), q[1] the high ones (64-127). Quarters (H 4: groups of 32): q[0]
// and q[1] the low nibbles of lines 0-7 and 8-15 (columns 0-31, 32-63),
// q[2] and q[3] the high nibbles (64-95, 96-127). One token runs four
// chains, two lines a step (quarters: lines r and r + 8), as i4_one does.
INL TVNNI void i4u_block(const uint8_t* pan, int c, const int32_t* const* x, const int MT, const int H, int pf,
                         kt_scratch* s, __m512i (*q)[4]) {
  const uint8_t* p = pan + (int64_t)c * 1024;
  const __m512i mask = _mm512_set1_epi8((char)0xf0);
  if (MT == 1) {
    const int32_t* xc = x[0] + 32 * c;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    const int d = H == 4 ? 8 : 1;  // the second line of a step
    for (int i = 0; i < 8; i++) {
      int r = H == 4 ? i : 2 * i;
      const uint8_t* l0 = p + r * 64;
      const uint8_t* l1 = p + (r + d) * 64;
      if (pf > 0) {
        _mm_prefetch((const char*)l0 + pf, _MM_HINT_T0);
        _mm_prefetch((const char*)l1 + pf, _MM_HINT_T0);
      }
      kt_side_pf(s);
      __m512i b0 = _mm512_loadu_si512(l0), b1 = _mm512_loadu_si512(l1);
      a0 = _mm512_dpbusd_epi32(a0, _mm512_and_si512(_mm512_slli_epi16(b0, 4), mask), _mm512_set1_epi32(xc[r]));
      a1 = _mm512_dpbusd_epi32(a1, _mm512_and_si512(b0, mask), _mm512_set1_epi32(xc[16 + r]));
      a2 = _mm512_dpbusd_epi32(a2, _mm512_and_si512(_mm512_slli_epi16(b1, 4), mask), _mm512_set1_epi32(xc[r + d]));
      a3 = _mm512_dpbusd_epi32(a3, _mm512_and_si512(b1, mask), _mm512_set1_epi32(xc[16 + r + d]));
    }
    if (H == 4) {
      q[0][0] = _mm512_add_epi32(q[0][0], a0);
      q[1][0] = _mm512_add_epi32(q[1][0], a2);
      q[2][0] = _mm512_add_epi32(q[2][0], a1);
      q[3][0] = _mm512_add_epi32(q[3][0], a3);
    } else {
      q[0][0] = _mm512_add_epi32(q[0][0], _mm512_add_epi32(a0, a2));
      q[1][0] = _mm512_add_epi32(q[1][0], _mm512_add_epi32(a1, a3));
    }
    return;
  }
  // the parts' indices constant within each run of lines, so that the
  // sums stay in registers
  for (int h = 0; h < H / 2; h++) {
    const int lo = H == 4 ? h : 0, hi = H == 4 ? 2 + h : 1;
    for (int r = 16 / (H / 2) * h; r < 16 / (H / 2) * (h + 1); r++) {
      if (pf > 0) _mm_prefetch((const char*)p + r * 64 + pf, _MM_HINT_T0);
      __m512i b = _mm512_loadu_si512(p + r * 64);
      __m512i bl = _mm512_and_si512(_mm512_slli_epi16(b, 4), mask);
      __m512i bh = _mm512_and_si512(b, mask);
      for (int t = 0; t < MT; t++) {
        q[lo][t] = _mm512_dpbusd_epi32(q[lo][t], bl, _mm512_set1_epi32(x[t][32 * c + r]));
        q[hi][t] = _mm512_dpbusd_epi32(q[hi][t], bh, _mm512_set1_epi32(x[t][32 * c + 16 + r]));
      }
    }
  }
}

// pf > 0: the panel is prefetched pf bytes ahead (a panel is one contiguous
// stream; a work item's panels are short streams for the hardware
// prefetcher); the drivers pass it for a panel's first pass only.
INL TVNNI void i8pk_body(const int8_t* pan, int k, const int32_t* const* x, __m512i* acc, const int MT, int pf,
                         kt_scratch* s) {
  const __m512i flip = _mm512_set1_epi32((int)0x80808080u);
  if (MT == 1) {
    // one token: four chains over the words of a flipped block of 16
    // (flip_words; integer sums are exact, so any grouping gives the same
    // sums): with the panel in the caches the multiply-add latency, not the
    // loads, would set the pace of fewer chains
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    int32_t xf[16];
    int j = 0;
    for (; j + 16 <= k / 4; j += 16) {
      flip_words(x[0] + j, xf);
      for (int q = 0; q < 16; q += 4) {
        const int8_t* w = pan + (int64_t)(j + q) * 64;
        if (pf > 0)
          for (int l = 0; l < 4; l++) _mm_prefetch((const char*)w + l * 64 + pf, _MM_HINT_T0);
        kt_side_pf(s);
        kt_side_pf(s);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(xf[q]), _mm512_loadu_si512(w));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(xf[q + 1]), _mm512_loadu_si512(w + 64));
        a2 = _mm512_dpbusd_epi32(a2, _mm512_set1_epi32(xf[q + 2]), _mm512_loadu_si512(w + 128));
        a3 = _mm512_dpbusd_epi32(a3, _mm512_set1_epi32(xf[q + 3]), _mm512_loadu_si512(w + 192));
      }
    }
    for (; j < k / 4; j++)
      a0 = _mm512_dpbusd_epi32(a0, _mm512_xor_si512(_mm512_set1_epi32(x[0][j]), flip),
                               _mm512_loadu_si512(pan + (int64_t)j * 64));
    acc[0] = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
    return;
  }
  for (int t = 0; t < MT; t++) acc[t] = _mm512_setzero_si512();
  for (int j = 0; j < k / 4; j++) {
    if (pf > 0) _mm_prefetch((const char*)pan + (int64_t)j * 64 + pf, _MM_HINT_T0);
    __m512i wv = _mm512_loadu_si512(pan + (int64_t)j * 64);
    for (int t = 0; t < MT; t++)
      acc[t] = _mm512_dpbusd_epi32(acc[t], _mm512_xor_si512(_mm512_set1_epi32(x[t][j]), flip), wv);
  }
}

// i4pk_body gives each of MT tokens its integer sums over an int4 panel of
// k columns, 128-column block by block (i4_block).
INL TVNNI void i4pk_body(const uint8_t* pan, int k, const int32_t* const* x, __m512i* acc, const int MT, int pf,
                         kt_scratch* s) {
  __m512i lo[8], hi[8];
  for (int t = 0; t < MT; t++) lo[t] = hi[t] = _mm512_setzero_si512();
  for (int c = 0; c < k / 128; c++) i4_block(pan, c, x, MT, pf, s, lo, hi);
  for (int t = 0; t < MT; t++) acc[t] = _mm512_add_epi32(lo[t], hi[t]);
}

#define INT_PANEL_DRIVER(NAME, BODY, PANEL_BYTES)                                                       \
  TVNNI void NAME(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,           \
                  kt_scratch* s) {                                                                      \
    int k = W->k, pf = s->dec_pf;                                                                       \
    const int8_t* X = (const int8_t*)A->a;                                                              \
    for (int p = 0; p < nn / 16; p++) {                                                                 \
      int row = n0 + p * 16;                                                                            \
      const void* pan = W->w + (int64_t)(row / 16) * (PANEL_BYTES);                                     \
      __m512i corr = _mm512_loadu_si512(W->corr + row);                                                 \
      __m512 ws = _mm512_loadu_ps(W->scale + row);                                                      \
      for (int t0 = 0; t0 < m; t0 += KT_DEC_M) {                                                        \
        int mt = m - t0 < KT_DEC_M ? m - t0 : KT_DEC_M;                                                 \
        const int32_t* x[8];                                                                            \
        __m512i acc[8];                                                                                 \
        for (int t = 0; t < 8; t++) x[t] = (const int32_t*)(X + (int64_t)(t0 + (t < mt ? t : 0)) * A->ld); \
        int pft = t0 == 0 ? pf : 0; /* later passes find the panel in the caches */                   \
        if (mt == 1)                                                                                    \
          BODY(pan, k, x, acc, 1, pft, s);                                                              \
        else if (mt == 2)                                                                               \
          BODY(pan, k, x, acc, 2, pft, s);                                                              \
        else if (mt <= 4)                                                                               \
          BODY(pan, k, x, acc, 4, pft, s);                                                              \
        else                                                                                            \
          BODY(pan, k, x, acc, 8, pft, s);                                                              \
        for (int t = 0; t < mt; t++)                                                                    \
          int_store(acc[t], corr, ws, A->as[t0 + t], C + (int64_t)(t0 + t) * ldc + p * 16);             \
      }                                                                                                 \
    }                                                                                                   \
  }

INT_PANEL_DRIVER(kt_vnni_i8pk, i8pk_body, 16 * k)
INT_PANEL_DRIVER(kt_vnni_i4pk, i4pk_body, 8 * k)

// Group-wise int4 (groups of 32, 64 or 128 columns; panels of unsigned
// codes u = v + 8): each group's Σ 16u·x (i4u_block's parts, added as
// integers) less 128 times the activations' sum over it (gs[t], kt_gsum)
// is Σ 16v·x, scaled into f32 (the bf16 scales are per 16 v). pf > 0: the
// panel is prefetched pf bytes ahead as in i8pk_body, and its group scales
// (32 bytes per group) two 128-column blocks ahead (the driver passes it
// for the first pass).
INL TVNNI void i4g_body(const uint8_t* pan, int k, int group, const uint16_t* sc, const int32_t* const* gs,
                        const int32_t* const* x, __m512* f, const int MT, int pf, kt_scratch* s) {
  const int gb = 128 / group;  // groups per 128-column block
  for (int t = 0; t < MT; t++) f[t] = _mm512_setzero_ps();
  if (pf > 0) kt_pf_gscales(sc, 0, 2 * gb < k / group ? 2 * gb : k / group);
  for (int c = 0; c < k / 128; c++) {
    if (pf > 0 && c + 2 < k / 128) kt_pf_gscales(sc, (int64_t)(c + 2) * gb, (int64_t)(c + 3) * gb);
    __m512i q[4][4];
    const int H = group == 32 ? 4 : 2;  // parts of the block: quarters or halves
    for (int j = 0; j < H; j++)
      for (int t = 0; t < MT; t++) q[j][t] = _mm512_setzero_si512();
    if (H == 4)
      i4u_block(pan, c, x, MT, 4, pf, s, q);
    else
      i4u_block(pan, c, x, MT, 2, pf, s, q);
    const int per = H / gb;  // parts per group
    for (int g = 0; g < gb; g++) {
      int gi = c * gb + g;
      __m512 sg = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(sc + (int64_t)gi * 16))), 16));
      for (int t = 0; t < MT; t++) {
        __m512i a = q[g * per][t];
        for (int i = 1; i < per; i++) a = _mm512_add_epi32(a, q[g * per + i][t]);
        a = _mm512_sub_epi32(a, _mm512_set1_epi32(128 * gs[t][gi]));
        f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), sg, f[t]);
      }
    }
  }
}

TVNNI void kt_vnni_i4gpk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                         kt_scratch* s) {
  int k = W->k, ng = k / W->group, pf = s->dec_pf;
  const int8_t* X = (const int8_t*)A->a;
  for (int c0 = 0; c0 < m; c0 += KT_GSUM_TOK) {
    int mc = m - c0 < KT_GSUM_TOK ? m - c0 : KT_GSUM_TOK;
    kt_gsum(X + (int64_t)c0 * A->ld, A->ld, mc, k, W->group, s->gsum);
    for (int p = 0; p < nn / 16; p++) {
      int pi = n0 / 16 + p;
      const uint8_t* pan = W->w + (int64_t)pi * 8 * k;
      const uint16_t* sc = W->gscale + (int64_t)pi * ng * 16;
      for (int t0 = 0; t0 < mc; t0 += 4) {
        int mt = mc - t0 < 4 ? mc - t0 : 4;
        const int32_t* x[4];
        const int32_t* gs[4];
        __m512 f[4];
        for (int t = 0; t < 4; t++) {
          int tt = t0 + (t < mt ? t : 0);
          x[t] = (const int32_t*)(X + (int64_t)(c0 + tt) * A->ld);
          gs[t] = s->gsum + (int64_t)tt * ng;
        }
        int pft = c0 == 0 && t0 == 0 ? pf : 0;  // later passes find the panel in the caches
        if (mt == 1)
          i4g_body(pan, k, W->group, sc, gs, x, f, 1, pft, s);
        else if (mt == 2)
          i4g_body(pan, k, W->group, sc, gs, x, f, 2, pft, s);
        else
          i4g_body(pan, k, W->group, sc, gs, x, f, 4, pft, s);
        for (int t = 0; t < mt; t++)
          _mm512_storeu_ps(C + (int64_t)(c0 + t0 + t) * ldc + p * 16,
                           _mm512_mul_ps(f[t], _mm512_set1_ps(A->as[c0 + t0 + t])));
      }
    }
  }
}

// ---------------------------------------------------------------- row-major bf16 / fp8 (decode)

INL T512 __m512 ld_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

INL T512 __m512 ld_fp8(const uint8_t* p) {
  __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p));
  __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x7f)), 20),
                                 _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24));
  return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
}

// Two rows x MT tokens of dot products; XB: activations are bf16; FP8: weights are fp8.
INL T512 void rm_body(const kt_mat* W, int row, const void* const* x, float* const* c, const int MT,
                      const int XB, const int FP8) {
  int k = W->k;
  __m512 a0[4], a1[4];
  for (int t = 0; t < MT; t++) a0[t] = a1[t] = _mm512_setzero_ps();
  const float* s0 = NULL;
  if (FP8) s0 = W->scale + (int64_t)((W->row0 + row) / 128) * W->sld;
  // The next pair of rows is fetched while this one is read: rows of a
  // row-major matrix are short streams (1 KiB for a 512-wide down row), too
  // short for the hardware prefetcher to reach its stride before a row ends.
  // A prefetch past the matrix's last row is harmless (never faults).
  const int64_t esz = FP8 ? 1 : 2;
  const char* nx = (const char*)W->w + (int64_t)(row + 2) * W->ld * esz;
  const int64_t ldb = W->ld * esz;
  for (int kk = 0; kk < k; kk += 16) {
    __m512 w0, w1;
    if (((kk * esz) & 63) == 0) {
      _mm_prefetch(nx + kk * esz, _MM_HINT_T0);
      _mm_prefetch(nx + ldb + kk * esz, _MM_HINT_T0);
    }
    if (FP8) {
      const uint8_t* r0 = W->w + (int64_t)row * W->ld + kk;
      __m512 sv = _mm512_set1_ps(s0[(W->col0 + kk) / 128]);
      w0 = _mm512_mul_ps(ld_fp8(r0), sv);
      w1 = _mm512_mul_ps(ld_fp8(r0 + W->ld), sv);
    } else {
      const uint16_t* r0 = (const uint16_t*)W->w + (int64_t)row * W->ld + kk;
      w0 = ld_bf16(r0);
      w1 = ld_bf16(r0 + W->ld);
    }
    for (int t = 0; t < MT; t++) {
      __m512 xv = XB ? ld_bf16((const uint16_t*)x[t] + kk) : _mm512_loadu_ps((const float*)x[t] + kk);
      a0[t] = _mm512_fmadd_ps(w0, xv, a0[t]);
      a1[t] = _mm512_fmadd_ps(w1, xv, a1[t]);
    }
  }
  for (int t = 0; t < MT; t++) {
    c[t][0] = _mm512_reduce_add_ps(a0[t]);
    c[t][1] = _mm512_reduce_add_ps(a1[t]);
  }
}

#define RM_DRIVER(NAME, XB, FP8, ATTR)                                                                  \
  ATTR void NAME(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,            \
                 kt_scratch* s) {                                                                       \
    (void)s;                                                                                            \
    int esz = XB ? 2 : 4;                                                                               \
    for (int t0 = 0; t0 < m; t0 += 4) {                                                                 \
      int mt = m - t0 < 4 ? m - t0 : 4;                                                                 \
      const void* x[4];                                                                                 \
      for (int t = 0; t < 4; t++)                                                                       \
        x[t] = (const char*)A->a + (int64_t)(t0 + (t < mt ? t : 0)) * A->ld * esz;                      \
      for (int j = 0; j < nn; j += 2) {                                                                 \
        float* c[4];                                                                                    \
        float dummy[2];                                                                                 \
        for (int t = 0; t < 4; t++) c[t] = t < mt ? C + (int64_t)(t0 + t) * ldc + j : dummy;           \
        if (mt == 1)                                                                                    \
          rm_body(W, n0 + j, x, c, 1, XB, FP8);                                                         \
        else if (mt == 2)                                                                               \
          rm_body(W, n0 + j, x, c, 2, XB, FP8);                                                         \
        else                                                                                            \
          rm_body(W, n0 + j, x, c, 4, XB, FP8);                                                         \
      }                                                                                                 \
    }                                                                                                   \
  }

RM_DRIVER(kt_avx512_bf16rm, 0, 0, T512)
RM_DRIVER(kt_avx512_fp8rm, 0, 1, T512)
RM_DRIVER(kt_avx512bf16_bf16rm, 1, 0, T512)
RM_DRIVER(kt_avx512bf16_fp8rm, 1, 1, T512)

// ---------------------------------------------------------------- on-the-fly panel packing

// tr16 transposes 16 rows of 16 dwords in place: r[j] becomes column j.
INL T512 void tr16(__m512i* r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int q = 0; q < 4; q++) {
    __m512i v0 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x88), v1 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xdd);
    __m512i w0 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x88), w1 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xdd);
    r[q] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    r[8 + q] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
    r[4 + q] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[12 + q] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
  }
}

INL T512 __m256i f32_to_bf16x16(__m512 f) {
  __m512i u = _mm512_castps_si512(f);
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                   _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

// kt_avx512_pack_rm packs rows [n0, n0+nn) of a row-major bf16 or fp8
// matrix into bf16 panels, as kt_pack_rm_to_bf16pk does, 16x16 dwords at a time.
T512 void kt_avx512_pack_rm(const kt_mat* W, int n0, int nn, uint16_t* dst) {
  int k = W->k;
  int fp8 = W->scale != NULL;
  for (int p = 0; p < nn / 16; p++) {
    uint16_t* panel = dst + (int64_t)p * 16 * k;
    for (int kc = 0; kc < k / 32; kc++) {
      __m512i r[16];
      for (int i = 0; i < 16; i++) {
        int row = n0 + p * 16 + i;
        if (!fp8) {
          r[i] = _mm512_loadu_si512((const uint16_t*)W->w + (int64_t)row * W->ld + kc * 32);
        } else {
          const uint8_t* src = W->w + (int64_t)row * W->ld + kc * 32;
          float s = W->scale[(int64_t)((W->row0 + row) / 128) * W->sld + (W->col0 + kc * 32) / 128];
          __m512 sv = _mm512_set1_ps(s);
          __m256i lo = f32_to_bf16x16(_mm512_mul_ps(ld_fp8(src), sv));
          __m256i hi = f32_to_bf16x16(_mm512_mul_ps(ld_fp8(src + 16), sv));
          r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
      }
      tr16(r);
      for (int j = 0; j < 16; j++) _mm512_storeu_si512(panel + ((int64_t)kc * 16 + j) * 32, r[j]);
    }
  }
}

// ---------------------------------------------------------------- conversions

#define KT_CONVERT_BODY 1
#define KT_CONV_VEC 512
#define KT_CONV_ATTR T512
#define CONV(name) kt_avx512_##name
#include "convert.h"
#undef CONV
#undef KT_CONV_VEC
#undef KT_CONV_ATTR

// ---------------------------------------------------------------- activation

INL T512 __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-88.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

T512 void kt_avx512_silu_mul(const float* g, const float* u, float* h, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 gv = _mm512_loadu_ps(g + i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    __m512 sg = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_storeu_ps(h + i, _mm512_mul_ps(sg, _mm512_loadu_ps(u + i)));
  }
  for (; i < n; i++) h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

T512 uint64_t kt_avx512_sum_bytes(const void* p, int64_t bytes) {
  const char* c = (const char*)p;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(c + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(c + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(c + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(c + i + 192));
  }
  a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  return (uint64_t)_mm512_reduce_add_epi64(a0);
}

// ---------------------------------------------------------------- int4 group scales (load time)

// kt_avx512_scale4_errs is pack.c's scale4_errs with its nine candidate
// scales (amax/7 shrunk by 0, 5, ..., 40 %) in the lanes of one vector: each
// lane does the scalar loop's float operations in its order, with no fused
// multiply-adds (fp-contract off), so scales and errors are bitwise the
// scalar ones (TestScale4ErrsVector). kt_pack_i4g spends most of its time
// here: nine passes over each group become one.
__attribute__((target("avx512f"), optimize("fp-contract=off"))) int kt_avx512_scale4_errs(const float* x, int n,
                                                                                        float amax, float* s9,
                                                                                        float* e9) {
  const __m512 lane = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512 c = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(_mm512_set1_ps(0.05f), lane));
  __m512 s = _mm512_div_ps(_mm512_mul_ps(_mm512_set1_ps(amax), c), _mm512_set1_ps(7.0f));
  __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), s);
  __m512 err = _mm512_setzero_ps();
  const __m512 lo = _mm512_set1_ps(-7.0f), hi = _mm512_set1_ps(7.0f);
  for (int j = 0; j < n; j++) {
    __m512 xj = _mm512_set1_ps(x[j]);
    __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(xj, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 q = _mm512_sub_ps(_mm512_mul_ps(_mm512_min_ps(_mm512_max_ps(r, lo), hi), s), xj);
    err = _mm512_add_ps(err, _mm512_mul_ps(q, q));
  }
  float es[16], ss[16];
  _mm512_storeu_ps(es, err);
  _mm512_storeu_ps(ss, s);
  int cnt = 0;
  for (; cnt < 9 && ss[cnt] > 0; cnt++) {  // the scalar loop stops at its first s <= 0 (s falls with the lane)
    s9[cnt] = ss[cnt];
    e9[cnt] = es[cnt];
  }
  return cnt;
}
