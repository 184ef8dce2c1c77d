// kt_internal.h: declarations shared by the engine and the kernel files.
#ifndef KT_INTERNAL_H
#define KT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kt_moe.h"

// Activation formats a kernel reads.
enum { KT_ACT_F32 = 1, KT_ACT_BF16 = 2, KT_ACT_S8 = 3 };

// Rows of activations for one expert: row i at a + i*ld elements, or, when
// tiled is set (AMX prefill only), in tile order: the rows come in blocks of
// 16, each block takes the bytes of its 16 rows, and within a block the
// 64-byte column chunk c of row r is at c*1024 + r*64, so every A tile the
// kernel loads is 1 KiB of contiguous memory (KT_TILE_ROW below).
typedef struct {
  const void* a;
  int64_t ld;
  const float* as;  // KT_ACT_S8: per-row scale
  int tiled;
} kt_act;

// kt_put_row stores a row of rb bytes (a multiple of 64 when tiled) as row s
// of an activation buffer, row-major or in the tile order described above.
static inline void kt_put_row(char* buf, int64_t s, int64_t rb, const void* src, int tiled) {
  if (!tiled) {
    __builtin_memcpy(buf + s * rb, src, (size_t)rb);
    return;
  }
  char* d = buf + (s & ~(int64_t)15) * rb + (s & 15) * 64;
  const char* p = (const char*)src;
  for (int64_t c = 0; c < rb / 64; c++) __builtin_memcpy(d + c * 1024, p + c * 64, 64);
}

// Per-thread scratch handed to kernels (64-byte aligned).
typedef struct {
  void* pack;          // on-the-fly packed weights (KT_NB rows x max K, bf16 or int8)
  void* pack2;         // second panel buffer (up projection)
  int32_t* ci;         // int32 tile scratch [KT_MCH][KT_NB]
  float* row;          // one f32 row of the widest matrix dimension
  int amx_kch;         // AMX prefill: 1 KiB tile steps per K block (<= 0: the whole K in one pass)
  int amx_pf;          // AMX prefill: prefetch the tiles this many steps ahead (<= 0: none)
  int c_nt;            // AMX prefill: write C with non-temporal stores (C 64-byte aligned, ldc*4 a multiple of 64)
  int dec_pf;          // one-token decode (int8/int4/bf16 panels): prefetch this many bytes ahead (<= 0: none)
} kt_scratch;

#define KT_NB 32     // weight rows per work item (two 16-row panels)
#define KT_MCH 512   // most tokens per kernel call in prefill (scratch size; kt_engine_config.mch picks)
#define KT_DEC_M 8   // tokens per pass of the line kernels

// C[i*ldc + j] = sum_k W[n0+j][k] * A[i][k], i < m, j < nn (nn multiple of 16, <= KT_NB).
typedef void (*kt_kernel)(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C,
                          int ldc, kt_scratch* s);

// Kernel lookup: returns NULL when (fmt, isa level) has no kernel.
// level: KT_ISA_AVX2, KT_ISA_AVX512 (uses VNNI/BF16 bits in isa), KT_ISA_AMX.
kt_kernel kt_pick_kernel(int fmt, int level, int isa);
int kt_act_format(int fmt, int isa);

// silu(g)*u over n floats into h.
void kt_silu_mul(const float* g, const float* u, float* h, int n, int isa);

// Conversions of activation rows (portable reference; the engine uses the ISA versions).
void kt_row_to_act(const void* src, int src_bf16, int k, int act, void* dst, float* scale);
void kt_avx2_row_to_act(const void* src, int src_bf16, int n, int act, void* dst, float* scale, float* tmp);
void kt_avx512_row_to_act(const void* src, int src_bf16, int n, int act, void* dst, float* scale, float* tmp);
void kt_avx2_merge(const float* const* parts, const float* w, int np, int n, void* out, int out_bf16, int incr, float* tmp);
void kt_avx512_merge(const float* const* parts, const float* w, int np, int n, void* out, int out_bf16, int incr,
                     float* tmp);

// Kernels per ISA (defined in kern_*.c).
void kt_avx2_bf16pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx2_i8pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx2_i4pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx2_i4gpk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx2_bf16rm(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx2_fp8rm(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx2_silu_mul(const float* g, const float* u, float* h, int n);

void kt_avx512_bf16pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx512bf16_bf16pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_vnni_i8pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_vnni_i4pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_vnni_i4gpk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx512_bf16rm(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx512_fp8rm(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx512bf16_bf16rm(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx512bf16_fp8rm(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_avx512_silu_mul(const float* g, const float* u, float* h, int n);
// prefill on row-major formats packs each item's rows once into a bf16 panel
void kt_avx512_pack_rm(const kt_mat* W, int n0, int nn, uint16_t* dst);

int kt_amx_init_thread(void);
void kt_amx_bf16pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_amx_i8pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_amx_i4pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);

// Portable packing of a row-major source slice into a bf16 panel (used on the fly).
void kt_pack_rm_to_bf16pk(const kt_mat* W, int n0, int nn, uint16_t* dst);

// Streaming read kernels for the bandwidth probe.
uint64_t kt_avx2_sum_bytes(const void* p, int64_t bytes);
uint64_t kt_avx512_sum_bytes(const void* p, int64_t bytes);

static inline float kt_bf16f(uint16_t b) {
  union { uint32_t u; float f; } v;
  v.u = (uint32_t)b << 16;
  return v.f;
}
static inline uint16_t kt_f2bf(float f) {
  union { uint32_t u; float f; } v;
  v.f = f;
  uint32_t u = v.u;
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
float kt_fp8f(uint8_t b);

#endif
