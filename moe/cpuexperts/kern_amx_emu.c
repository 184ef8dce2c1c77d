// kern_amx_emu.c: the AMX prefill kernel body (kern_amx_core.h) over a
// scalar emulation of the tile registers, for tests on CPUs without AMX
// (the dev machine and CI): it checks the loop structure, the A/B/C
// addressing and every knob against a float64 reference, and that the
// knobs do not change results (kt_emu_amx_run, TestAMXCoreEmulated). The
// kt_amx_emu_* kernels below are kern_amx.c's kernels over the same
// emulation: with KT_ISA_AMX_EMU the engine runs its whole AMX prefill
// path with them (tests only). Needs AVX-512F and BW (the epilogues and
// the int4 unpack use them); never called on the hot path.
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kern_amx_i4.h"
#include "kt_internal.h"

#define TEMU __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx2")))

static __thread union {
  float f[16][16];
  int32_t i[16][16];
  uint8_t b[16][64];
} emu_t[8];

static void emu_zero(int t) { memset(&emu_t[t], 0, sizeof emu_t[t]); }
static void emu_load(int t, const void* p, int64_t stride) {
  for (int r = 0; r < 16; r++) memcpy(emu_t[t].b[r], (const char*)p + r * stride, 64);
}
static void emu_store(int t, void* p, int64_t stride) {
  for (int r = 0; r < 16; r++) memcpy((char*)p + r * stride, emu_t[t].b[r], 64);
}
// tdpbf16ps: C[i][j] += sum over pairs q of A[i][2q..2q+1] . B[q][2j..2j+1]
static void emu_dpbf16(int c, int a, int b) {
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      float acc = emu_t[c].f[i][j];
      for (int q = 0; q < 16; q++) {
        const uint16_t* ar = (const uint16_t*)emu_t[a].b[i];
        const uint16_t* br = (const uint16_t*)emu_t[b].b[q];
        acc += kt_bf16f(ar[2 * q]) * kt_bf16f(br[2 * j]) + kt_bf16f(ar[2 * q + 1]) * kt_bf16f(br[2 * j + 1]);
      }
      emu_t[c].f[i][j] = acc;
    }
}
// tdpbssd: C[i][j] += sum over quads q of A[i][4q..4q+3] . B[q][4j..4j+3] (s8)
static void emu_dpbssd(int c, int a, int b) {
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      int32_t acc = emu_t[c].i[i][j];
      for (int q = 0; q < 16; q++)
        for (int e = 0; e < 4; e++) acc += (int8_t)emu_t[a].b[i][4 * q + e] * (int8_t)emu_t[b].b[q][4 * j + e];
      emu_t[c].i[i][j] = acc;
    }
}

#define KT_CORE_HELPER_ATTR TEMU
#define TZERO(t) emu_zero(t)
#define TLOAD(t, p, stride) emu_load(t, p, stride)
#define TLOAD_T1(t, p, stride) emu_load(t, p, stride)
#define TSTORE(t, p, stride) emu_store(t, p, stride)
#define CORE_ATTR TEMU

#define CORE_FN emu_bf16_core
#define CORE_INT 0
#define TDP(c, a, b) emu_dpbf16(c, a, b)
#include "kern_amx_core.h"
#undef CORE_FN
#undef CORE_INT
#undef TDP

#define CORE_FN emu_i8_core
#define CORE_FN4 emu_i4f_core
#define CORE_INT 1
#define TDP(c, a, b) emu_dpbssd(c, a, b)
#include "kern_amx_core.h"

// The kernels of kern_amx.c over the emulated tiles, with the same
// signature (kt_kernel) and arguments. The tiles are per thread (__thread),
// so any number of engine workers may run them at once. kt_amx_emu_calls
// counts their calls (tests: the engine did take its AMX prefill path).

static _Atomic int64_t emu_calls, emu_fused_calls;

int64_t kt_amx_emu_calls(void) { return atomic_load_explicit(&emu_calls, memory_order_relaxed); }

// kt_amx_emu_fused_calls counts the calls of the emulated int4 kernel with
// the fused unpack (tests: the engine did take it).
int64_t kt_amx_emu_fused_calls(void) { return atomic_load_explicit(&emu_fused_calls, memory_order_relaxed); }

static TEMU void emu_i4f_counted(const kt_mat* W, int n0, int nn, const float* rmax, const float* wscale,
                                 const kt_act* A, int m, float* C, int ldc, kt_scratch* s, int8_t* full) {
  atomic_fetch_add_explicit(&emu_fused_calls, 1, memory_order_relaxed);
  emu_i4f_core(W, n0, nn, rmax, wscale, A, m, C, ldc, s, full);
}

TEMU void kt_amx_emu_bf16pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                            kt_scratch* s) {
  atomic_fetch_add_explicit(&emu_calls, 1, memory_order_relaxed);
  emu_bf16_core((const char*)W->w + (int64_t)(n0 / 16) * 32 * W->k, W->k / 32, NULL, A, 2, m, C, ldc, nn, s);
}

TEMU void kt_amx_emu_i8pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                          kt_scratch* s) {
  atomic_fetch_add_explicit(&emu_calls, 1, memory_order_relaxed);
  emu_i8_core((const char*)W->w + (int64_t)n0 * W->k, W->k / 64, W->scale + n0, A, 1, m, C, ldc, nn, s);
}

TEMU void kt_amx_emu_i4pk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                          kt_scratch* s) {
  atomic_fetch_add_explicit(&emu_calls, 1, memory_order_relaxed);
  amx_i4_run(W, n0, nn, A, m, C, ldc, s, emu_i8_core, emu_i4f_counted, 0);
}

TEMU void kt_amx_emu_i4gpk(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C, int ldc,
                           kt_scratch* s) {
  atomic_fetch_add_explicit(&emu_calls, 1, memory_order_relaxed);
  amx_i4_run(W, n0, nn, A, m, C, ldc, s, emu_i8_core, emu_i4f_counted, 1);
}

static uint32_t emu_rng(uint32_t* s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}
static float emu_rand(uint32_t* s) { return (float)emu_rng(s) / (float)(1 << 24) * 2.0f - 1.0f; }

// emu_check copies C (m x nn, ldc apart) to out and returns its largest
// difference from the float64 products of the rows of af (m x k) and wf
// (nn x k), relative to the largest |product|.
static double emu_check(const float* af, const float* wf, const float* C, int ldc, int m, int nn, int k, float* out) {
  double emax = 0, rmax = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < nn; j++) {
      double ref = 0;
      for (int c = 0; c < k; c++) ref += (double)af[(int64_t)i * k + c] * wf[(int64_t)j * k + c];
      emax = fmax(emax, fabs(C[i * ldc + j] - ref));
      rmax = fmax(rmax, fabs(ref));
      out[i * nn + j] = C[i * ldc + j];
    }
  return rmax > 0 ? emax / rmax : emax;
}

// kt_emu_amx_run runs the emulated kernel (fmt KT_FMT_BF16_PK or KT_FMT_I8_PK)
// on fixed random data, nn weight rows, m tokens, k columns, with the given
// knobs (kch, pf, pfm, nxl: kt_scratch; c_nt: non-temporal C; tiled: tile-order
// activations). out receives C (m x nn); *maxerr the largest
// |C - reference| relative to the largest |reference|. Returns 0, or -1 on
// bad arguments or no memory.
TEMU int kt_emu_amx_run(int fmt, int m, int k, int nn, int kch, int pf, int pfm, int nxl, int c_nt, int tiled,
                        float* out, double* maxerr) {
  if ((fmt != KT_FMT_BF16_PK && fmt != KT_FMT_I8_PK) || m < 1 || m > KT_MCH || k < 64 || k % 64 || nn < 16 ||
      nn > KT_NB || nn % 16)
    return -1;
  int i8 = fmt == KT_FMT_I8_PK;
  int mp = (m + 31) / 32 * 32, ldc = KT_NB;
  int64_t rb = (int64_t)k * (i8 ? 1 : 2);
  float* wf = malloc(sizeof(float) * nn * k);
  float* af = malloc(sizeof(float) * mp * k);
  void* wp = aligned_alloc(64, (size_t)nn * k * 2);
  float* ws = malloc(sizeof(float) * nn);
  int32_t* wc = malloc(sizeof(int32_t) * nn);
  char* abuf = aligned_alloc(64, (size_t)(mp * rb));
  char* arow = malloc((size_t)rb);
  float* as = malloc(sizeof(float) * mp);
  float* C = aligned_alloc(64, sizeof(float) * mp * ldc);
  int32_t* ci = aligned_alloc(64, sizeof(int32_t) * KT_MCH * KT_NB);
  int ret = -1;
  if (!wf || !af || !wp || !ws || !wc || !abuf || !arow || !as || !C || !ci) goto done;
  uint32_t seed = 12345;
  for (int64_t i = 0; i < (int64_t)nn * k; i++) wf[i] = emu_rand(&seed);
  for (int64_t i = 0; i < (int64_t)mp * k; i++) af[i] = emu_rand(&seed);
  memset(abuf, 0, (size_t)(mp * rb));
  if (i8)
    kt_pack_i8(wf, k, nn, k, (int8_t*)wp, ws, wc);
  else
    kt_pack_bf16(wf, k, nn, k, (uint16_t*)wp);
  for (int r = 0; r < m; r++) {
    if (i8) {
      kt_quant_rows_i8(af + (int64_t)r * k, k, 1, k, (int8_t*)arow, &as[r]);
      for (int c = 0; c < k; c++) af[(int64_t)r * k + c] = ((int8_t*)arow)[c] * as[r];
    } else {
      for (int c = 0; c < k; c++) {
        uint16_t b = kt_f2bf(af[(int64_t)r * k + c]);
        ((uint16_t*)arow)[c] = b;
        af[(int64_t)r * k + c] = kt_bf16f(b);
      }
    }
    kt_put_row(abuf, r, rb, arow, tiled);
  }
  // the weights as the kernel sees them (bf16- or int8-rounded)
  for (int j = 0; j < nn; j++) {
    if (i8) {
      int8_t q[k];
      float sc;
      kt_quant_rows_i8(wf + (int64_t)j * k, k, 1, k, q, &sc);
      for (int c = 0; c < k; c++) wf[(int64_t)j * k + c] = q[c] * sc;
    } else {
      for (int c = 0; c < k; c++) wf[(int64_t)j * k + c] = kt_bf16f(kt_f2bf(wf[(int64_t)j * k + c]));
    }
  }
  kt_scratch s;
  memset(&s, 0, sizeof s);
  s.ci = ci;
  s.amx_kch = kch;
  s.amx_pf = pf;
  s.amx_pfm = pfm;
  s.amx_nxl = nxl;
  s.c_nt = c_nt;
  s.nx = (const char*)wf;  // any readable bytes: prefetches never fault
  s.nxb = (int64_t)nn * k * 4;
  kt_act A = {abuf, k, i8 ? as : NULL, tiled};
  memset(C, 0, sizeof(float) * mp * ldc);
  if (i8)
    emu_i8_core((const char*)wp, k / 64, ws, &A, 1, m, C, ldc, nn, &s);
  else
    emu_bf16_core((const char*)wp, k / 32, NULL, &A, 2, m, C, ldc, nn, &s);
  _mm_sfence();
  *maxerr = emu_check(af, wf, C, ldc, m, nn, k, out);
  ret = 0;
done:
  free(wf);
  free(af);
  free(wp);
  free(ws);
  free(wc);
  free(abuf);
  free(arow);
  free(as);
  free(C);
  free(ci);
  return ret;
}


// kt_emu_amx_i4g_run runs the emulated group-wise int4 kernel
// (KT_FMT_I4G_PK: panels of unsigned codes, requantized to int8 panels as
// they are unpacked, amx_i4_run) on fixed random data: nn weight rows of k
// columns in groups of group, m tokens in the tile-order layout; fused
// selects the unpack inside the tile loop (CORE_FN4) over the unpack of
// whole panels. out receives C (m x nn); *maxerr the largest |C - reference|
// relative to the largest |reference|, the reference being the panels' own
// int4 values (code - 8 times the group scale) against the int8
// activations in float64: what is left is the requantization to int8.
// Returns 0, or -1 on bad arguments or no memory.
TEMU int kt_emu_amx_i4g_run(int m, int k, int nn, int group, int fused, float* out, double* maxerr) {
  if (m < 1 || m > KT_MCH || k < 128 || k % 128 || nn < 16 || nn > KT_NB || nn % 16 ||
      (group != 32 && group != 64 && group != 128))
    return -1;
  int mp = (m + 31) / 32 * 32, ldc = KT_NB, ng = k / group;
  float* wf = malloc(sizeof(float) * nn * k);
  float* af = malloc(sizeof(float) * mp * k);
  uint8_t* wp = aligned_alloc(64, (size_t)nn * k / 2);
  uint16_t* ws = malloc(sizeof(uint16_t) * nn * ng);
  char* abuf = aligned_alloc(64, (size_t)mp * k);
  int8_t* arow = malloc((size_t)k);
  float* as = malloc(sizeof(float) * mp);
  float* C = aligned_alloc(64, sizeof(float) * mp * ldc);
  int32_t* ci = aligned_alloc(64, sizeof(int32_t) * KT_MCH * KT_NB);
  int8_t* pack = aligned_alloc(64, (size_t)KT_NB * k);
  int ret = -1;
  if (!wf || !af || !wp || !ws || !abuf || !arow || !as || !C || !ci || !pack) goto done;
  uint32_t seed = 777;
  // weights whose groups differ in scale: the requantization's case
  for (int64_t i = 0; i < (int64_t)nn * k; i++) wf[i] = emu_rand(&seed) * (float)(1 + (i / group) % 5);
  for (int64_t i = 0; i < (int64_t)mp * k; i++) af[i] = emu_rand(&seed);
  memset(abuf, 0, (size_t)mp * k);
  kt_pack_i4g(wf, k, nn, k, group, wp, ws);
  for (int r = 0; r < m; r++) {
    kt_quant_rows_i8(af + (int64_t)r * k, k, 1, k, arow, &as[r]);
    for (int c = 0; c < k; c++) af[(int64_t)r * k + c] = arow[c] * as[r];
    kt_put_row(abuf, r, k, arow, 1);
  }
  // the int4 values the panels hold, read back by the layout of put4
  for (int j = 0; j < nn; j++)
    for (int c = 0; c < k; c++) {
      int off = c % 128, r = (off % 64) / 4;
      uint8_t b = wp[(int64_t)(j / 16) * 8 * k + ((int64_t)(c / 128) * 16 + r) * 64 + (j % 16) * 4 + off % 4];
      int code = off >= 64 ? b >> 4 : b & 15;
      wf[(int64_t)j * k + c] = (float)(code - 8) * 16.0f * kt_bf16f(ws[((int64_t)(j / 16) * ng + c / group) * 16 + j % 16]);
    }
  kt_scratch s;
  memset(&s, 0, sizeof s);
  s.ci = ci;
  s.pack = pack;
  s.i4_fuse = fused ? KT_MCH : 0;
  kt_mat W;
  memset(&W, 0, sizeof W);
  W.w = wp;
  W.gscale = ws;
  W.n = nn;
  W.k = k;
  W.group = group;
  kt_act A = {abuf, k, as, 1};
  memset(C, 0, sizeof(float) * mp * ldc);
  kt_amx_emu_i4gpk(&W, 0, nn, &A, m, C, ldc, &s);
  *maxerr = emu_check(af, wf, C, ldc, m, nn, k, out);
  ret = 0;
done:
  free(wf);
  free(af);
  free(wp);
  free(ws);
  free(abuf);
  free(arow);
  free(as);
  free(C);
  free(ci);
  free(pack);
  return ret;
}
