// kern_amx.c: AMX tile kernels for prefill (many tokens per expert). Only
// called when CPUID reports AMX and the kernel granted the tile state.
#include <immintrin.h>
#include <string.h>

#include "kern_amx_i4.h"
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

#define KT_CORE_HELPER_ATTR TAMX
#define TZERO(t) _tile_zero(t)
#define TLOAD(t, p, stride) _tile_loadd(t, p, stride)
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
  amx_i4_unpack(W, n0, nn, (int8_t*)s->pack);
  amx_i8_core((const char*)s->pack, W->k / 64, W->scale + n0, A, 1, m, C, ldc, nn, s);
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
