// kern_amx.c: AMX tile kernels for prefill (many tokens per expert). Only
// called when CPUID reports AMX and the kernel granted the tile state.
#include <immintrin.h>
#include <string.h>

#include "kt_internal.h"

#define TAMX __attribute__((target("amx-tile,amx-int8,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,fma,avx2")))

// The tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM) is requested
// once per process from Go, by sysinfo.RequestAMX (DetectFeatures).

typedef struct {
  uint8_t palette, start_row, rsv[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed, aligned(64))) tilecfg;

// kt_amx_init_thread loads the tile configuration every kernel here uses:
// tiles 0-3 accumulators, 4-5 A (tokens), 6-7 B (weights), all 16 x 64 bytes.
// It returns 0 when the configuration reads back as written. (GCC 12's
// _tile_loadconfig declares an 8-byte memory operand, which lets the compiler
// drop the stores that fill the rest of the struct; hence the own asm.)
TAMX int kt_amx_init_thread(void) {
  static const tilecfg want = {
      .palette = 1,
      .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
      .rows = {16, 16, 16, 16, 16, 16, 16, 16},
  };
  tilecfg got;
  memset(&got, 0xff, sizeof got);
  __asm__ volatile("ldtilecfg %0" : : "m"(want) : "memory");
  __asm__ volatile("sttilecfg %0" : "=m"(got) : : "memory");
  for (int i = 0; i < 8; i++)
    if (got.rows[i] != 16 || got.colsb[i] != 64) return -1;
  return got.palette == 1 ? 0 : -1;
}

// C rows are written in blocks of 16: C must have room for round_up(m, 16)
// rows, and A must be readable for round_up(m, 32) rows (the engine pads
// every expert to 32 slots). A tiles are addressed through kt_act_layout
// (kt_internal.h): row-major activations are loaded with the row stride;
// tiled ones are 1 KiB contiguous tiles, the two of a step side by side.

// K blocking: a kernel call covers nn <= 32 weight rows (one B pair) and
// m <= KT_MCH tokens. The K dimension is cut into blocks of kch tile steps;
// for each block the B pair (2*kch KiB) stays in L1 while every 32-token
// block passes over it, so only the A tiles come from L2. The accumulators
// of all token blocks (m x 32 values, up to 64 KiB) are parked in s->ci between K
// blocks: f32 or int32 values stored and reloaded exactly, and every C tile
// sees the same tile products in the same order as without blocking, so the
// results are bitwise those of a single pass.
static inline int amx_kblock(const kt_scratch* s, int nkc) {
  int kb = s->amx_kch > 0 ? s->amx_kch : nkc;
  return kb < nkc ? kb : nkc;
}

// Software prefetch: AMX tile registers are not renamed, so the tile loads
// of the next step wait for the products that still read those tiles and
// the load latency is exposed; from L1 it is short. AMX_PF prefetches the
// two A tiles and the two B tiles s->amx_pf steps ahead into L1 (a tile is
// 1 KiB: 16 lines).
static inline void amx_pf_tile(const char* p, int64_t stride) {
  for (int r = 0; r < 16; r++) _mm_prefetch(p + r * stride, _MM_HINT_T0);
}
#define AMX_PF(kc)                                                          \
  do {                                                                      \
    int kp_ = (kc) + pfd;                                                   \
    if (pfd > 0 && kp_ < nkc) {                                             \
      amx_pf_tile(a0 + kp_ * L.step, L.stride);                             \
      if (two_m) amx_pf_tile(a1 + kp_ * L.step, L.stride);                  \
      amx_pf_tile((const char*)b0 + (int64_t)kp_ * 1024, 64);               \
      if (two_n) amx_pf_tile((const char*)b1 + (int64_t)kp_ * 1024, 64);    \
    }                                                                       \
  } while (0)

// amx_stream_rows copies rows of 16 or 32 floats from the parked
// accumulators (row stride KT_NB) to C with non-temporal stores: the down
// projection's per-slot outputs are read back only by the merge, so writing
// them around the caches saves the read-for-ownership of every line.
static inline TAMX void amx_stream_rows(const float* t, float* C, int ldc, int rows, int two_n) {
  for (int i = 0; i < rows; i++) {
    _mm512_stream_ps(C + (int64_t)i * ldc, _mm512_loadu_ps(t + i * KT_NB));
    if (two_n) _mm512_stream_ps(C + (int64_t)i * ldc + 16, _mm512_loadu_ps(t + i * KT_NB + 16));
  }
}

TAMX void kt_amx_bf16pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                        kt_scratch* s) {
  int k = W->k, nkc = k / 32;
  int kb = amx_kblock(s, nkc), pfd = s->amx_pf;
  const char* X = (const char*)A->a;
  kt_alayout L = kt_act_layout(A, 2);
  float* acc = (float*)s->ci;  // [KT_MCH][KT_NB]
  const int la = KT_NB * 4;
  for (int p = 0; p < nn / 16; p += 2) {
    int two_n = p + 1 < nn / 16;
    const char* b0 = (const char*)W->w + (int64_t)(n0 / 16 + p) * 32 * k;
    const char* b1 = b0 + (int64_t)32 * k;
    for (int c0 = 0; c0 < nkc; c0 += kb) {
      int c1 = c0 + kb < nkc ? c0 + kb : nkc;
      int first = c0 == 0, last = c1 == nkc;
      for (int i0 = 0; i0 < m; i0 += 32) {
        int two_m = m - i0 > 16;
        const char* a0 = X + (int64_t)(i0 / 32) * L.blk32;
        const char* a1 = a0 + L.a1;
        float* t = acc + i0 * KT_NB;
        if (first) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        } else {
          _tile_loadd(0, t, la);
          if (two_n) _tile_loadd(1, t + 16, la);
          if (two_m) {
            _tile_loadd(2, t + 16 * KT_NB, la);
            if (two_n) _tile_loadd(3, t + 16 * KT_NB + 16, la);
          }
        }
        for (int kc = c0; kc < c1; kc++) {
          AMX_PF(kc);
          _tile_loadd(4, a0 + kc * L.step, L.stride);
          _tile_loadd(6, b0 + (int64_t)kc * 1024, 64);
          _tile_dpbf16ps(0, 4, 6);
          if (two_n) {
            _tile_loadd(7, b1 + (int64_t)kc * 1024, 64);
            _tile_dpbf16ps(1, 4, 7);
          }
          if (two_m) {
            _tile_loadd(5, a1 + kc * L.step, L.stride);
            _tile_dpbf16ps(2, 5, 6);
            if (two_n) _tile_dpbf16ps(3, 5, 7);
          }
        }
        float* c = t;
        int lc = la;
        if (last && !s->c_nt) {
          c = C + (int64_t)i0 * ldc + p * 16;
          lc = ldc * 4;
        }
        int rs = lc / 4;  // row stride in floats
        _tile_stored(0, c, lc);
        if (two_n) _tile_stored(1, c + 16, lc);
        if (two_m) {
          _tile_stored(2, c + 16 * rs, lc);
          if (two_n) _tile_stored(3, c + 16 * rs + 16, lc);
        }
        if (last && s->c_nt) amx_stream_rows(t, C + (int64_t)i0 * ldc + p * 16, ldc, m - i0 < 32 ? m - i0 : 32, two_n);
      }
    }
  }
}

// int8 panels: s8 x s8 (tdpbssd), then scaled per row of W and per token.
static TAMX void amx_i8_core(const int8_t* w, int k, const float* wscale, const kt_act* A, int m, float* C,
                             int ldc, int nn, kt_scratch* s) {
  const char* X = (const char*)A->a;
  kt_alayout L = kt_act_layout(A, 1);
  int nkc = k / 64;
  int kb = amx_kblock(s, nkc), pfd = s->amx_pf;
  int32_t* ci = s->ci;  // [KT_MCH][KT_NB]
  const int la = KT_NB * 4;
  for (int p = 0; p < nn / 16; p += 2) {
    int two_n = p + 1 < nn / 16;
    const int8_t* b0 = w + (int64_t)p * 16 * k;
    const int8_t* b1 = b0 + (int64_t)16 * k;
    for (int c0 = 0; c0 < nkc; c0 += kb) {
      int c1 = c0 + kb < nkc ? c0 + kb : nkc;
      int first = c0 == 0, last = c1 == nkc;
      for (int i0 = 0; i0 < m; i0 += 32) {
        int two_m = m - i0 > 16;
        const char* a0 = X + (int64_t)(i0 / 32) * L.blk32;
        const char* a1 = a0 + L.a1;
        int32_t* t = ci + i0 * KT_NB;
        if (first) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        } else {
          _tile_loadd(0, t, la);
          if (two_n) _tile_loadd(1, t + 16, la);
          if (two_m) {
            _tile_loadd(2, t + 16 * KT_NB, la);
            if (two_n) _tile_loadd(3, t + 16 * KT_NB + 16, la);
          }
        }
        for (int kc = c0; kc < c1; kc++) {
          AMX_PF(kc);
          _tile_loadd(4, a0 + kc * L.step, L.stride);
          _tile_loadd(6, b0 + (int64_t)kc * 1024, 64);
          _tile_dpbssd(0, 4, 6);
          if (two_n) {
            _tile_loadd(7, b1 + (int64_t)kc * 1024, 64);
            _tile_dpbssd(1, 4, 7);
          }
          if (two_m) {
            _tile_loadd(5, a1 + kc * L.step, L.stride);
            _tile_dpbssd(2, 5, 6);
            if (two_n) _tile_dpbssd(3, 5, 7);
          }
        }
        _tile_stored(0, t, la);
        if (two_n) _tile_stored(1, t + 16, la);
        if (two_m) {
          _tile_stored(2, t + 16 * KT_NB, la);
          if (two_n) _tile_stored(3, t + 16 * KT_NB + 16, la);
        }
        if (!last) continue;
        int rows = m - i0 < 32 ? m - i0 : 32;
        int cols = two_n ? 32 : 16;
        for (int i = 0; i < rows; i++) {
          __m512 as = _mm512_set1_ps(A->as[i0 + i]);
          for (int j = 0; j < cols; j += 16) {
            __m512 f = _mm512_cvtepi32_ps(_mm512_loadu_si512(t + i * KT_NB + j));
            f = _mm512_mul_ps(_mm512_mul_ps(f, _mm512_loadu_ps(wscale + p * 16 + j)), as);
            if (s->c_nt)
              _mm512_stream_ps(C + (int64_t)(i0 + i) * ldc + p * 16 + j, f);
            else
              _mm512_storeu_ps(C + (int64_t)(i0 + i) * ldc + p * 16 + j, f);
          }
        }
      }
    }
  }
}

TAMX void kt_amx_i8pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc, kt_scratch* s) {
  amx_i8_core((const int8_t*)W->w + (int64_t)n0 * W->k, W->k, W->scale + n0, A, m, C, ldc, nn, s);
}

// int4 panels: unpack the nn rows to int8 panels in scratch once, then the int8 core.
TAMX void kt_amx_i4pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc, kt_scratch* s) {
  int k = W->k;
  int8_t* dst = (int8_t*)s->pack;
  const __m512i mask = _mm512_set1_epi8((char)0xf0);
  for (int p = 0; p < nn / 16; p++) {
    const uint8_t* src = W->w + (int64_t)(n0 / 16 + p) * 8 * k;
    int8_t* d = dst + (int64_t)p * 16 * k;
    for (int c = 0; c < k / 128; c++)
      for (int r = 0; r < 16; r++) {
        __m512i b = _mm512_loadu_si512(src + ((int64_t)c * 16 + r) * 64);
        _mm512_storeu_si512(d + ((int64_t)c * 32 + r) * 64, _mm512_and_si512(_mm512_slli_epi16(b, 4), mask));
        _mm512_storeu_si512(d + ((int64_t)c * 32 + 16 + r) * 64, _mm512_and_si512(b, mask));
      }
  }
  amx_i8_core(dst, k, W->scale + n0, A, m, C, ldc, nn, s);
}

