// kern_lora.c: expert LoRA on the CPU expert engine (SGLang-KT's KT expert
// LoRA, KT's *_SFT methods: the base weights in the layer's format, the LoRA
// factors in f32). Per expert, with s = lora_alpha / r:
//   g = W_g x + s·B_g(A_g x),  u = W_u x + s·B_u(A_u x),  h = silu(g)·u,
//   y = W_d h + s·B_d(A_d h).
// The engine calls three hooks: kt_lora_begin when a task starts (resets the
// per-expert state), kt_lora_gate_up after the gate and up kernels of an
// intermediate block (adds s·B(A x) before the SiLU), kt_lora_down after the
// down kernel of a hidden block (adds s·B_d(A_d h) to the slot's output).
//
// A x (per slot, 2r values) and A_d h (r values, over this pool's slice of
// h; the pools' partial outputs are summed by the merge, and the delta is
// linear in that slice) are computed once per (pool, expert) by the first
// work item that needs them; the others wait for it (an item only waits for
// one a running thread claimed, so nothing can deadlock). Every value comes
// from one fixed summation order per ISA (the engine's: AVX-512 dot products
// when it runs AVX-512, chosen at run time; plain C otherwise): results do
// not depend on the threads.
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "kt_internal.h"

static inline _Atomic int* lora_st(const kt_lora* lo, int pool, int x, int which) {
  return (_Atomic int*)&lo->st[pool][2 * x + which];
}

void kt_lora_begin(const kt_lora* lo, const int* active, int nactive, int npools) {
  for (int p = 0; p < npools; p++)
    for (int a = 0; a < nactive; a++) {
      atomic_store_explicit(lora_st(lo, p, active[a], 0), 0, memory_order_relaxed);
      atomic_store_explicit(lora_st(lo, p, active[a], 1), 0, memory_order_relaxed);
    }
}

static float dot(const float* a, const float* b, int n) {
  float s[8] = {0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
  float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; i++) t += a[i] * b[i];
  return t;
}

// dot512 is dot on AVX-512 (two accumulators, a masked tail).
__attribute__((target("avx512f"))) static float dot512(const float* a, const float* b, int n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
  }
  if (i + 16 <= n) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    i += 16;
  }
  if (i < n) {
    __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

// ldot is the dot product of the engine's ISA.
static inline float ldot(const kt_lora* lo, const float* a, const float* b, int n) {
  return (lo->isa & KT_ISA_AVX512) ? dot512(a, b, n) : dot(a, b, n);
}

static float bf16f(uint16_t v) {
  uint32_t u = (uint32_t)v << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// claim returns 1 when the caller must compute the state's data (and then
// publish it with atomic store 2), 0 once another thread has published it.
static int claim(_Atomic int* st) {
  int v = atomic_load_explicit(st, memory_order_acquire);
  if (v == 2) return 0;
  int zero = 0;
  if (v == 0 && atomic_compare_exchange_strong_explicit(st, &zero, 1, memory_order_acq_rel, memory_order_acquire))
    return 1;
  while (atomic_load_explicit(st, memory_order_acquire) != 2) _mm_pause();
  return 0;
}

// ax_ready makes A_g x and A_u x of expert x's m slots (from off) ready in
// lo->ax[pool]: x rows are read as the batch gives them (f32 or bf16).
static void ax_ready(const kt_lora* lo, const kt_batch* b, const int* slot_tok, int pool, int x, int off, int m, int H) {
  _Atomic int* st = lora_st(lo, pool, x, 0);
  if (!claim(st)) return;
  int r = lo->r;
  float row[H];
  const float* ga = lo->ga + (int64_t)x * r * H;
  const float* ua = lo->ua + (int64_t)x * r * H;
  for (int s = off; s < off + m; s++) {
    int t = slot_tok[s];
    float* ax = lo->ax[pool] + (int64_t)s * 2 * r;
    if (t < 0) {
      memset(ax, 0, sizeof(float) * 2 * r);
      continue;
    }
    const float* xr = row;
    if (b->x_bf16) {
      const uint16_t* src = (const uint16_t*)b->x + (int64_t)t * H;
      for (int i = 0; i < H; i++) row[i] = bf16f(src[i]);
    } else {
      xr = (const float*)b->x + (int64_t)t * H;
    }
    for (int j = 0; j < r; j++) {
      ax[j] = ldot(lo, ga + (int64_t)j * H, xr, H);
      ax[r + j] = ldot(lo, ua + (int64_t)j * H, xr, H);
    }
  }
  atomic_store_explicit(st, 2, memory_order_release);
}

void kt_lora_gate_up(const kt_lora* lo, const kt_batch* b, const int* slot_tok, int pool, int x, int off, int m, int s0,
                     int mm, int n0, float* cg, float* cu, int ldc, int H) {
  ax_ready(lo, b, slot_tok, pool, x, off, m, H);
  int r = lo->r;
  float s = lo->s;
  // rows n0.. of this pool's slice are rows row0 + n0.. of the expert's B [I][r]
  const float* gb = lo->gb + ((int64_t)x * lo->inter + lo->row0[pool] + n0) * r;
  const float* ub = lo->ub + ((int64_t)x * lo->inter + lo->row0[pool] + n0) * r;
  for (int i = 0; i < mm; i++) {
    const float* ax = lo->ax[pool] + (int64_t)(s0 + i) * 2 * r;
    float* g = cg + (int64_t)i * ldc;
    float* u = cu + (int64_t)i * ldc;
    for (int c = 0; c < KT_NB; c++) {
      g[c] += s * ldot(lo, gb + (int64_t)c * r, ax, r);
      u[c] += s * ldot(lo, ub + (int64_t)c * r, ax + r, r);
    }
  }
}

// ad_ready makes A_d h of expert x's m slots ready in lo->ad[pool], over
// this pool's slice of h (Hf rows of I floats).
static void ad_ready(const kt_lora* lo, int pool, int x, int off, int m, const float* Hf, int I) {
  _Atomic int* st = lora_st(lo, pool, x, 1);
  if (!claim(st)) return;
  int r = lo->r;
  const float* da = lo->da + (int64_t)x * r * lo->inter + lo->row0[pool];
  for (int s = off; s < off + m; s++) {
    float* ad = lo->ad[pool] + (int64_t)s * r;
    const float* h = Hf + (int64_t)s * I;
    for (int j = 0; j < r; j++) ad[j] = ldot(lo, da + (int64_t)j * lo->inter, h, I);
  }
  atomic_store_explicit(st, 2, memory_order_release);
}

void kt_lora_down(const kt_lora* lo, int pool, int x, int off, int m, int n0, int nn, const float* Hf, int I, float* Y,
                  int ldy) {
  ad_ready(lo, pool, x, off, m, Hf, I);
  int r = lo->r;
  float s = lo->s;
  const float* db = lo->db + ((int64_t)x * lo->hidden + n0) * r;
  for (int i = off; i < off + m; i++) {
    const float* ad = lo->ad[pool] + (int64_t)i * r;
    float* y = Y + (int64_t)i * ldy;
    for (int c = 0; c < nn; c++) y[c] += s * ldot(lo, db + (int64_t)c * r, ad, r);
  }
}
