// kern_amx_i4.h: the int4 -> int8 unpack of the AMX int4 kernel, shared by
// the real kernel (kern_amx.c) and its emulation (kern_amx_emu.c) so that
// the engine tests on CPUs without AMX run the same unpack.
#ifndef KERN_AMX_I4_H
#define KERN_AMX_I4_H

#include <immintrin.h>

#include "kt_internal.h"

// amx_i4_unpack unpacks weight rows [n0, n0+nn) of a KT_FMT_I4_PK matrix
// (16-row panels; per 128 columns, 16 lines of 64 bytes, 16 rows x one
// k-quad each, whose low nibbles hold columns 0-63 of the block and high
// nibbles columns 64-127) into int8 panels at dst in the KT_FMT_I8_PK layout
// the int8 kernel reads (per 128 columns, the 16 lines of the low nibbles,
// then the 16 of the high ones), each value q as q*16 (pack.c: the scales
// are divided by 16).
//
// With a K slab in s (k_end > 0, int8 tile steps of 64 columns, even
// bounds) only that slab's columns are unpacked, at their places.
static inline __attribute__((target("avx512f,avx512bw"))) void amx_i4_unpack(const kt_mat* W, int n0, int nn,
                                                                             int8_t* dst, const kt_scratch* s) {
  int k = W->k;
  int cb = s->k_end > 0 ? s->k_beg / 2 : 0, ce = s->k_end > 0 ? (s->k_end + 1) / 2 : k / 128;
  const __m512i mask = _mm512_set1_epi8((char)0xf0);
  for (int p = 0; p < nn / 16; p++) {
    const uint8_t* src = W->w + (int64_t)(n0 / 16 + p) * 8 * k;
    int8_t* d = dst + (int64_t)p * 16 * k;
    for (int c = cb; c < ce; c++)
      for (int r = 0; r < 16; r++) {
        __m512i b = _mm512_loadu_si512(src + ((int64_t)c * 16 + r) * 64);
        _mm512_storeu_si512(d + ((int64_t)c * 32 + r) * 64, _mm512_and_si512(_mm512_slli_epi16(b, 4), mask));
        _mm512_storeu_si512(d + ((int64_t)c * 32 + 16 + r) * 64, _mm512_and_si512(b, mask));
      }
  }
}

// kt_i8_core_fn is the int8 AMX core (real or emulated) the int4 kernel runs
// over the unpacked panels.
typedef void (*kt_i8_core_fn)(const char* w, int nkc, const float* wscale, const kt_act* A, int esz, int m, float* C,
                              int ldc, int nn, kt_scratch* s);

// amx_i4_run is the int4 prefill kernel: unpack the call's panels, run the
// int8 core. With s->i4_kch > 0 (even) it unpacks and runs that many int8
// tile steps at a time, the sums parked between them as between K slabs (in
// the caller's park when the call is itself a slab, else in s->ci), so each
// unpacked piece is read by the tiles while it is still in L1; results are
// bitwise those of one unpack (TestAMXKBlockBitwise).
static inline __attribute__((target("avx512f,avx512bw"))) void amx_i4_run(const kt_mat* W, int n0, int nn,
                                                                          const kt_act* A, int m, float* C, int ldc,
                                                                          kt_scratch* s, kt_i8_core_fn core) {
  int nkc = W->k / 64;
  int slab = s->k_end > 0;
  int b0 = slab ? s->k_beg : 0, b1 = slab ? s->k_end : nkc;
  int kb = s->i4_kch & ~1;
  if (kb <= 0 || kb >= b1 - b0) {
    amx_i4_unpack(W, n0, nn, (int8_t*)s->pack, s);
    core((const char*)s->pack, nkc, W->scale + n0, A, 1, m, C, ldc, nn, s);
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
    amx_i4_unpack(W, n0, nn, (int8_t*)s->pack, s);
    core((const char*)s->pack, nkc, W->scale + n0, A, 1, m, C, ldc, nn, s);
  }
  // the caller's slab, as it was
  s->k_beg = slab ? b0 : 0;
  s->k_end = slab ? b1 : 0;
  s->k_first = f0;
  s->k_last = l0;
  s->park = slab ? pk : NULL;
}

#endif
