// kern_amx_i4.h: the int4 -> int8 unpack of the AMX int4 kernels (AMXINT4,
// INT4_KGROUP), shared by the real kernels (kern_amx.c) and their emulation
// (kern_amx_emu.c) so that the engine tests on CPUs without AMX run the same
// unpack.
#ifndef KERN_AMX_I4_H
#define KERN_AMX_I4_H

#include <immintrin.h>

#include "kt_internal.h"

// amx_i4g_requant multiplies the 64 signed bytes of v (q*16 of one line:
// 16 rows x one k-quad) by their row's fixed-point factor (amx_i4g_factor:
// rows 0-7 in flo, 8-15 in fhi), rounded (vpmulhrsw).
static inline __attribute__((target("avx512f,avx512bw"))) __m512i amx_i4g_requant(__m512i v, __m512i flo,
                                                                                __m512i fhi) {
  __m256i lo = _mm512_cvtepi16_epi8(_mm512_mulhrs_epi16(_mm512_cvtepi8_epi16(_mm512_castsi512_si256(v)), flo));
  __m256i hi = _mm512_cvtepi16_epi8(_mm512_mulhrs_epi16(_mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(v, 1)), fhi));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// amx_gscales widens 16 rows' bf16 group scales at sc to f32.
static inline __attribute__((target("avx512f"))) __m512 amx_gscales(const uint16_t* sc) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)sc)), 16));
}

// amx_i4g_factor is the fixed-point factor sc/rmax of 16 rows (0 where rmax
// is 0), each row's factor as an int16 spread over the four bytes of its
// k-quad: rows 0-7 in *lo (the low 32 bytes of a line), rows 8-15 in *hi.
static inline __attribute__((target("avx512f,avx512bw"))) void amx_i4g_factor(const uint16_t* sc, __m512 rmax,
                                                                           __m512i* lo, __m512i* hi) {
  __mmask16 nz = _mm512_cmp_ps_mask(rmax, _mm512_setzero_ps(), _CMP_GT_OQ);
  __m512 f = _mm512_maskz_div_ps(nz, amx_gscales(sc), rmax);
  __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(f, _mm512_set1_ps(32768.0f))), _mm512_set1_epi32(32767));
  // word i of *lo takes the low word of dword i/4 (row i/4), of *hi that of dword 8 + i/4
  const __m512i rlo = _mm512_set_epi16(14, 14, 14, 14, 12, 12, 12, 12, 10, 10, 10, 10, 8, 8, 8, 8, 6, 6, 6, 6, 4, 4,
                                       4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
  const __m512i rhi = _mm512_add_epi16(rlo, _mm512_set1_epi16(16));
  *lo = _mm512_permutexvar_epi16(rlo, q);
  *hi = _mm512_permutexvar_epi16(rhi, q);
}

// amx_i4g_rowmax stores at out the largest group scale of each of rows
// [n0, n0+nn) of a KT_FMT_I4G_PK matrix (scales [N/16][K/G][16]): the
// per-row scale of its int8 requantization, over the whole K whatever the
// slab, so that every slab's panels share it.
static inline __attribute__((target("avx512f"))) void amx_i4g_rowmax(const kt_mat* W, int n0, int nn, float* out) {
  int ng = W->k / W->group;
  for (int p = 0; p < nn / 16; p++) {
    const uint16_t* sc = W->gscale + (int64_t)(n0 / 16 + p) * ng * 16;
    __m512 m = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) m = _mm512_max_ps(m, amx_gscales(sc + g * 16));
    _mm512_storeu_ps(out + p * 16, m);
  }
}

// amx_i4_block unpacks 128-column block c of one 16-row KT_FMT_I4_PK or
// KT_FMT_I4G_PK panel (src: the panel's first line; per 128 columns, 16
// lines of 64 bytes, 16 rows x one k-quad each, whose low nibbles hold
// columns 0-63 of the block and high nibbles columns 64-127) into the two
// int8 tile-step images of the KT_FMT_I8_PK layout the int8 core reads: lo
// (columns 0-63) and hi (64-127), 16 lines of 64 bytes each, every value q
// as q*16 (pack.c: the scales are divided by 16).
//
// Group-wise panels (sc: the panel's group scales [K/G][16], rm: each row's
// largest group scale, amx_i4g_rowmax) are requantized on the way to one
// int8 scale per row: a value q of group g becomes round(q*16 * sc[g]/rm)
// (in [-112, 112]; exact for the row's largest group), so the int8 core
// scales the row by rm. The factor sc[g]/rm is applied in 16-bit fixed
// point (vpmulhrsw, 15 fraction bits): the int8 step rm adds at most rm/2
// per weight, against the int4 step sc[g] of the group itself.
//
// pf > 0: each line is prefetched that many bytes ahead of its read (a
// call's panels are one contiguous run, and an item's next call usually
// follows it): where experts get few rows the unpack, not the tiles, reads
// the weights from memory.
static inline __attribute__((target("avx512f,avx512bw"))) void amx_i4_block(const uint8_t* src, int c, const uint16_t* sc,
                                                                            __m512 rm, int group, int pf,
                                                                            int8_t* lo_d, int8_t* hi_d) {
  const uint8_t* b0 = src + (int64_t)c * 16 * 64;
  const __m512i mask = _mm512_set1_epi8((char)0xf0), flip = _mm512_set1_epi8((char)0x80);
  // the factors of the block's quarters: 0 and 1 the low nibbles of lines
  // 0-7 and 8-15 (columns 0-31, 32-63), 2 and 3 the high ones (64-127); a
  // quarter in the group of the one before shares its factor
  __m512i fl[4], fh[4];
  for (int j = 0; j < 4; j++) fl[j] = fh[j] = _mm512_setzero_si512();
  if (sc)
    for (int j = 0; j < 4; j++) {
      int g = (c * 128 + 32 * j) / group;
      if (j > 0 && g == (c * 128 + 32 * (j - 1)) / group) {
        fl[j] = fl[j - 1];
        fh[j] = fh[j - 1];
      } else {
        amx_i4g_factor(sc + (int64_t)g * 16, rm, &fl[j], &fh[j]);
      }
    }
  for (int h = 0; h < 2; h++)
    for (int r = 8 * h; r < 8 * h + 8; r++) {
      if (pf > 0) _mm_prefetch((const char*)b0 + r * 64 + pf, _MM_HINT_T0);
      __m512i b = _mm512_loadu_si512(b0 + r * 64);
      __m512i lo = _mm512_and_si512(_mm512_slli_epi16(b, 4), mask), hi = _mm512_and_si512(b, mask);
      if (sc) {  // unsigned codes u = v + 8: 16u xor 0x80 is 16v as a signed byte
        lo = amx_i4g_requant(_mm512_xor_si512(lo, flip), fl[h], fh[h]);
        hi = amx_i4g_requant(_mm512_xor_si512(hi, flip), fl[2 + h], fh[2 + h]);
      }
      _mm512_storeu_si512(lo_d + r * 64, lo);
      _mm512_storeu_si512(hi_d + r * 64, hi);
    }
}

// amx_i4_unpack unpacks weight rows [n0, n0+nn) of a KT_FMT_I4_PK matrix
// into int8 panels at dst in the KT_FMT_I8_PK layout (per 128 columns, the
// 16 lines of the low nibbles, then the 16 of the high ones: amx_i4_block).
// A KT_FMT_I4G_PK matrix (grouped: a scale per row and group of 32, 64 or
// 128 columns) is requantized per row as amx_i4_block says, rmax holding each
// row's largest group scale.
//
// With a K slab in s (k_end > 0, int8 tile steps of 64 columns, even
// bounds) only that slab's columns are unpacked, at their places.
//
// s->i4_pf (s->i4g_pf for group-wise panels): amx_i4_block's prefetch.
static inline __attribute__((target("avx512f,avx512bw"))) void amx_i4_unpack(const kt_mat* W, int n0, int nn,
                                                                             int8_t* dst, const float* rmax,
                                                                             const kt_scratch* s) {
  int k = W->k, ng = rmax ? k / W->group : 0;
  int cb = s->k_end > 0 ? s->k_beg / 2 : 0, ce = s->k_end > 0 ? (s->k_end + 1) / 2 : k / 128;
  const int pf = rmax ? s->i4g_pf : s->i4_pf;
  for (int p = 0; p < nn / 16; p++) {
    const uint8_t* src = W->w + (int64_t)(n0 / 16 + p) * 8 * k;
    int8_t* d = dst + (int64_t)p * 16 * k;
    const uint16_t* sc = rmax ? W->gscale + (int64_t)(n0 / 16 + p) * ng * 16 : NULL;
    __m512 rm = rmax ? _mm512_loadu_ps(rmax + p * 16) : _mm512_setzero_ps();
    for (int c = cb; c < ce; c++)
      amx_i4_block(src, c, sc, rm, W->group, pf, d + (int64_t)c * 32 * 64, d + ((int64_t)c * 32 + 16) * 64);
  }
}

// kt_i8_core_fn is the int8 AMX core (real or emulated) the int4 kernel runs
// over the unpacked panels.
typedef void (*kt_i8_core_fn)(const char* w, int nkc, const float* wscale, const kt_act* A, int esz, int m, float* C,
                              int ldc, int nn, kt_scratch* s);

// kt_i4f_core_fn is the int4 kernel with the unpack fused into its tile
// loop, for calls of few tokens (kern_amx_core.h CORE_FN4).
typedef void (*kt_i4f_core_fn)(const kt_mat* W, int n0, int nn, const float* rmax, const float* wscale,
                               const kt_act* A, int m, float* C, int ldc, kt_scratch* s, int8_t* full);

// amx_i4_run is the int4 prefill kernel: unpack the call's panels, run the
// int8 core. Calls of at most s->i4_fuse tokens run the fused kernel
// instead; longer ones where s->i4_fuse1 has the format's bit (0 AMXINT4,
// 1 INT4_KGROUP) run it over their first 32 tokens, unpacking into the
// whole panels, and the int8 core over the rest. All these run the same
// products on the same int8 values: bitwise the same results. grouped: W
// is KT_FMT_I4G_PK, requantized per row (above), its row scales in s->wsc.
// With s->i4_kch > 0 (even) it unpacks and runs that many int8 tile steps
// at a time, the sums parked between them as between K slabs (in the
// caller's park when the call is itself a slab, else in s->ci), so each
// unpacked piece is read by the tiles while it is still in L1; results are
// bitwise those of one unpack (TestAMXKBlockBitwise).
static inline __attribute__((target("avx512f,avx512bw"))) void amx_i4_run(const kt_mat* W, int n0, int nn,
                                                                          const kt_act* A, int m, float* C, int ldc,
                                                                          kt_scratch* s, kt_i8_core_fn core,
                                                                          kt_i4f_core_fn fused, int grouped) {
  int nkc = W->k / 64;
  const float* rmax = NULL;
  const float* ws = grouped ? s->wsc : W->scale + n0;
  if (grouped) {
    amx_i4g_rowmax(W, n0, nn, s->wsc);
    rmax = s->wsc;
  }
  if (m <= s->i4_fuse) {
    fused(W, n0, nn, rmax, ws, A, m, C, ldc, s, NULL);
    return;
  }
  int slab = s->k_end > 0;
  int b0 = slab ? s->k_beg : 0, b1 = slab ? s->k_end : nkc;
  int kb = s->i4_kch & ~1;
  if (((s->i4_fuse1 >> grouped) & 1) && m > 32 && (kb <= 0 || kb >= b1 - b0)) {
    // the first 32 tokens with the unpack fused, into the whole panels; the
    // rest over them (the same products: bitwise the other paths)
    fused(W, n0, nn, rmax, ws, A, 32, C, ldc, s, (int8_t*)s->pack);
    kt_act A2 = *A;
    A2.a = (const char*)A->a + kt_act_layout(A, 1).blk32;
    A2.as = A->as + 32;
    float* C2 = s->c_bf16 ? (float*)((uint16_t*)C + 32 * (int64_t)ldc) : C + 32 * (int64_t)ldc;
    void* pk = s->park;
    if (slab) s->park = (char*)pk + 32 * KT_NB * 4;
    core((const char*)s->pack, nkc, ws, &A2, 1, m - 32, C2, ldc, nn, s);
    s->park = pk;
    return;
  }
  if (kb <= 0 || kb >= b1 - b0) {
    amx_i4_unpack(W, n0, nn, (int8_t*)s->pack, rmax, s);
    core((const char*)s->pack, nkc, ws, A, 1, m, C, ldc, nn, s);
    return;
  }
  int f0 = slab ? s->k_first : 1, l0 = slab ? s->k_last : 1;
  void* pk = slab ? s->park : (void*)s->ci;
  for (int k0 = b0; k0 < b1; k0 += kb) {
    s->k_beg = k0;
    s->k_end = k0 + kb < b1 ? k0 + kb : b1;
    s->k_first = f0 && k0 == b0;
    s->k_last = l0 && s->k_end == b1;
    s->park = pk;
    amx_i4_unpack(W, n0, nn, (int8_t*)s->pack, rmax, s);
    core((const char*)s->pack, nkc, ws, A, 1, m, C, ldc, nn, s);
  }
  // the caller's slab, as it was
  s->k_beg = slab ? b0 : 0;
  s->k_end = slab ? b1 : 0;
  s->k_first = f0;
  s->k_last = l0;
  s->park = slab ? pk : NULL;
}

#endif
