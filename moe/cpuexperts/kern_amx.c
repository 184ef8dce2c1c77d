// kern_amx.c: AMX tile kernels for prefill (many tokens per expert). Only
// called when CPUID reports AMX and the kernel granted the tile state.
#include <immintrin.h>
#include <string.h>

#include "kern_amx_i4.h"
#include "kt_internal.h"

#define TAMX __attribute__((target("amx-tile,amx-int8,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,fma,avx2")))
#define TAMXV \
  __attribute__((target("amx-tile,amx-int8,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,fma,avx2")))

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

#define KT_CORE_HELPER_ATTR TAMX
#define TZERO(t) _tile_zero(t)
#define TLOAD(t, p, stride) _tile_loadd(t, p, stride)
#define TLOAD_T1(t, p, stride) _tile_stream_loadd(t, p, stride)
#define TSTORE(t, p, stride) _tile_stored(t, p, stride)
#define CORE_ATTR TAMX

#define CORE_FN amx_bf16_core
#define CORE_INT 0
#define TDP(c, a, b) _tile_dpbf16ps(c, a, b)
#include "kern_amx_core.h"
#undef CORE_FN
#undef CORE_INT
#undef TDP

#define CORE_FN amx_i8_core
#define CORE_FN4 amx_i4f_core
#define CORE_INT 1
#define TDP(c, a, b) _tile_dpbssd(c, a, b)
#include "kern_amx_core.h"

// bf16 panels (tdpbf16ps): 16-row panels of k/32 B tiles.
TAMX void kt_amx_bf16pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                        kt_scratch* s) {
  amx_bf16_core((const char*)W->w + (int64_t)(n0 / 16) * 32 * W->k, W->k / 32, NULL, A, 2, m, C, ldc, nn, s);
}

// int8 panels: s8 x s8 (tdpbssd), then scaled per row of W and per token.
TAMX void kt_amx_i8pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc, kt_scratch* s) {
  amx_i8_core((const char*)W->w + (int64_t)n0 * W->k, W->k / 64, W->scale + n0, A, 1, m, C, ldc, nn, s);
}

// int4 panels: unpack the nn rows to int8 panels in scratch once
// (kern_amx_i4.h, shared with the emulated kernel), then the int8 core.
TAMX void kt_amx_i4pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc, kt_scratch* s) {
  amx_i4_run(W, n0, nn, A, m, C, ldc, s, amx_i8_core, amx_i4f_core, 0);
}

// group-wise int4 panels (INT4_KGROUP): requantized to int8 panels with one
// scale per row as they are unpacked (kern_amx_i4.h), then the int8 core.
TAMX void kt_amx_i4gpk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc, kt_scratch* s) {
  amx_i4_run(W, n0, nn, A, m, C, ldc, s, amx_i8_core, amx_i4f_core, 1);
}


// kt_amx_peak_loop issues iters rounds of four tile products (C0..C3 +=
// A4,A5 x B6,B7, the 2x2 block of the prefill kernels) with the operand
// tiles resident (loads = 0), or reloaded each round from one 4 KiB buffer
// that stays in L1 (loads = 1): the tile unit's own rate on this core, and
// with loads the rate the kernels could reach if every operand hit L1. The
// calling thread must have loaded the tile configuration.
TAMX void kt_amx_peak_loop(int i8, int loads, int64_t iters, const char* buf) {
  _tile_loadd(4, buf, 64);
  _tile_loadd(5, buf + 1024, 64);
  _tile_loadd(6, buf + 2048, 64);
  _tile_loadd(7, buf + 3072, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; i++) {
    if (loads) {
      _tile_loadd(4, buf, 64);
      _tile_loadd(6, buf + 2048, 64);
    }
    if (i8) _tile_dpbssd(0, 4, 6); else _tile_dpbf16ps(0, 4, 6);
    if (loads) _tile_loadd(7, buf + 3072, 64);
    if (i8) _tile_dpbssd(1, 4, 7); else _tile_dpbf16ps(1, 4, 7);
    if (loads) _tile_loadd(5, buf + 1024, 64);
    if (i8) _tile_dpbssd(2, 5, 6); else _tile_dpbf16ps(2, 5, 6);
    if (i8) _tile_dpbssd(3, 5, 7); else _tile_dpbf16ps(3, 5, 7);
  }
}

// kt_amx_peak_rows is kt_amx_peak_loop with operands reloaded from L1 and
// the A and C tiles (0-5) configured with rows rows instead of 16 (B stays
// 16 x 64 bytes): whether a tile product's time follows its rows, that is
// whether an expert's last, partly filled 16-token tile would cost less in
// a tile of its own height. It restores the kernels' configuration
// (kt_amx_init_thread) before it returns; -1 for rows outside 1..16.
TAMX int kt_amx_peak_rows(int i8, int rows, int64_t iters, const char* buf) {
  if (rows < 1 || rows > 16) return -1;
  tilecfg cfg = {.palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}};
  for (int i = 0; i < 8; i++) cfg.rows[i] = i < 6 ? (uint8_t)rows : 16;
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg) : "memory");
  kt_amx_peak_loop(i8, 1, iters, buf);
  return kt_amx_init_thread();
}

// MIX_DP is one vector dot product of the mixed peak loop: vdpbf16ps or
// vpdpbusd by I8.
#define MIX_DP(I8, acc, x, b) \
  ((I8) ? _mm512_dpbusd_epi32(acc, x, b) : (__m512i)_mm512_dpbf16_ps((__m512)(acc), (__m512bh)(x), (__m512bh)(b)))

// MIX_TOK updates token t's two accumulators with k pair/quad r.
#define MIX_TOK(I8, t, r)                                                   \
  do {                                                                      \
    __m512i x = _mm512_set1_epi32(*(const int*)(buf + (t) * 64 + (r) * 4)); \
    c##t##0 = MIX_DP(I8, c##t##0, x, b0);                                   \
    c##t##1 = MIX_DP(I8, c##t##1, x, b1);                                   \
  } while (0)

// MIX_BODY defines mix_I8_AMX_AVX: iters rounds of (AMX) the 2x2 tile
// block with its four operand tiles reloaded from L1 (as kt_amx_peak_loop
// with loads) and AVX tokens (4 or 8) x 32 rows x one K step of AVX-512
// dot products reading the same B tile rows (64 bytes: 16 rows x one k pair
// or quad) and broadcasting the tokens' pairs/quads from their tile rows, in
// one instruction stream. Accumulators are named locals so they stay in
// registers.
#define MIX_BODY(I8, AMX, AVX)                                                                         \
  static TAMXV __attribute__((noinline)) float mix_##I8##_##AMX##_##AVX(int64_t iters, const char* buf) { \
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;         \
    __m512i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00;      \
    __m512i c70 = c00, c71 = c00;                                                                        \
    for (int64_t i = 0; i < iters; i++) {                                                                \
      __asm__ volatile("" : "+r"(buf)); /* reload every round: no hoisting out of the loop */           \
      if (AMX) {                                                                                         \
        _tile_loadd(4, buf, 64);                                                                         \
        _tile_loadd(6, buf + 2048, 64);                                                                  \
        if (I8) _tile_dpbssd(0, 4, 6); else _tile_dpbf16ps(0, 4, 6);                                     \
        _tile_loadd(7, buf + 3072, 64);                                                                  \
        if (I8) _tile_dpbssd(1, 4, 7); else _tile_dpbf16ps(1, 4, 7);                                     \
        _tile_loadd(5, buf + 1024, 64);                                                                  \
        if (I8) _tile_dpbssd(2, 5, 6); else _tile_dpbf16ps(2, 5, 6);                                     \
        if (I8) _tile_dpbssd(3, 5, 7); else _tile_dpbf16ps(3, 5, 7);                                     \
      }                                                                                                  \
      if (AVX) {                                                                                         \
        _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++) {                                          \
          __m512i b0 = _mm512_loadu_si512(buf + 2048 + r * 64);                                          \
          __m512i b1 = _mm512_loadu_si512(buf + 3072 + r * 64);                                          \
          MIX_TOK(I8, 0, r);                                                                             \
          MIX_TOK(I8, 1, r);                                                                             \
          MIX_TOK(I8, 2, r);                                                                             \
          MIX_TOK(I8, 3, r);                                                                             \
          if (AVX > 4) {                                                                                 \
            MIX_TOK(I8, 4, r);                                                                           \
            MIX_TOK(I8, 5, r);                                                                           \
            MIX_TOK(I8, 6, r);                                                                           \
            MIX_TOK(I8, 7, r);                                                                           \
          }                                                                                              \
        }                                                                                                \
      }                                                                                                  \
    }                                                                                                    \
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(c00, c01), _mm512_add_epi32(c10, c11));               \
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c20, c21), _mm512_add_epi32(c30, c31)));   \
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c40, c41), _mm512_add_epi32(c50, c51)));   \
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c60, c61), _mm512_add_epi32(c70, c71)));   \
    return (float)_mm512_reduce_add_epi32(s);                                                            \
  }

MIX_BODY(0, 1, 4)
MIX_BODY(0, 1, 8)
MIX_BODY(0, 0, 8)
MIX_BODY(1, 1, 4)
MIX_BODY(1, 1, 8)
MIX_BODY(1, 0, 8)

// kt_amx_mix_loop measures whether one core's vector units add to its tile
// unit (mix_*): i8 picks int8 or bf16, amx the tile block beside avx vector
// tokens per round (4 or 8), or (amx 0) 8 vector tokens alone; the tile
// block alone is kt_amx_peak_loop with loads. The calling thread must have
// loaded the tile configuration when amx is set. It returns a value derived
// from the vector accumulators so they are not optimised away (-1: no such
// variant).
TAMXV float kt_amx_mix_loop(int i8, int amx, int avx, int64_t iters, const char* buf) {
  if (amx) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    if (avx == 8) return i8 ? mix_1_1_8(iters, buf) : mix_0_1_8(iters, buf);
    if (avx == 4) return i8 ? mix_1_1_4(iters, buf) : mix_0_1_4(iters, buf);
    return -1;
  }
  if (avx == 8) return i8 ? mix_1_0_8(iters, buf) : mix_0_0_8(iters, buf);
  return -1;
}
