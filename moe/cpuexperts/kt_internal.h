// kt_internal.h: declarations shared by the engine and the kernel files.
#ifndef KT_INTERNAL_H
#define KT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <xmmintrin.h>

#include "kt_moe.h"

// Activation formats a kernel reads.
enum { KT_ACT_F32 = 1, KT_ACT_BF16 = 2, KT_ACT_S8 = 3 };

// Rows of activations for one expert: row i at a + i*ld elements, or, when
// tiled is set (AMX prefill only), in tile order: the rows come in blocks of
// 32 (experts start at multiples of 32 slots), each block takes the bytes of
// its 32 rows, and within a block the 64-byte column chunk c of row r is at
// c*2048 + r*64. The two A tiles of one kernel step (rows 0-15 and 16-31 of
// chunk c) are then 2 KiB of contiguous memory, and successive steps follow
// each other: one sequential stream (kt_tiled_chunk below).
typedef struct {
  const void* a;
  int64_t ld;
  const float* as;  // KT_ACT_S8: per-row scale
  int tiled;
} kt_act;

#define KT_TBLK 32  // rows per tile-order block

// kt_tiled_chunk is where the 64-byte column chunk c of row s of a tile-order
// buffer with rows of rb bytes lives.
static inline char* kt_tiled_chunk(char* buf, int64_t s, int64_t rb, int64_t c) {
  return buf + (s & ~(int64_t)(KT_TBLK - 1)) * rb + c * (KT_TBLK * 64) + (s & (KT_TBLK - 1)) * 64;
}

// kt_put_row stores a row of rb bytes (a multiple of 64 when tiled) as row s
// of an activation buffer, row-major or in the tile order described above.
static inline void kt_put_row(char* buf, int64_t s, int64_t rb, const void* src, int tiled) {
  if (!tiled) {
    __builtin_memcpy(buf + s * rb, src, (size_t)rb);
    return;
  }
  const char* p = (const char*)src;
  for (int64_t c = 0; c < rb / 64; c++) __builtin_memcpy(kt_tiled_chunk(buf, s, rb, c), p + c * 64, 64);
}

// Addressing of the A tiles in an AMX kernel: for the 32-row block starting
// at row i0 (a multiple of 32) and step kc, the tile of rows 0-15 is at
// A + (i0/32)*blk32 + kc*step, the one of rows 16-31 a1 bytes further, and
// the rows of a tile are stride bytes apart (kt_check_tile_layout tests it).
typedef struct {
  int64_t blk32, a1, step, stride;
} kt_alayout;

static inline kt_alayout kt_act_layout(const kt_act* A, int64_t esz) {
  kt_alayout L;
  L.blk32 = KT_TBLK * A->ld * esz;
  if (A->tiled) {
    L.a1 = 16 * 64;
    L.step = KT_TBLK * 64;
    L.stride = 64;
  } else {
    L.a1 = 16 * A->ld * esz;
    L.step = 64;
    L.stride = A->ld * esz;
  }
  return L;
}

// Per-thread scratch handed to kernels (64-byte aligned).
typedef struct {
  void* pack;          // on-the-fly packed weights (KT_NB rows x max K, bf16 or int8)
  void* pack2;         // second panel buffer (up projection)
  int32_t* ci;         // int32 tile scratch [KT_MCH][KT_NB]
  float* row;          // one f32 row of the widest matrix dimension
  int amx_kch;         // AMX prefill: 1 KiB tile steps per K block (<= 0: the whole K in one pass)
  int amx_pf;          // AMX prefill: prefetch the tiles this many steps ahead (<= 0: none)
  int amx_pfm;         // AMX prefill: which tiles amx_pf prefetches (bit 0: A, bit 1: B)
  int amx_t1;          // AMX prefill: which tiles load with the T1 hint, tileloaddt1 (bit 0: A, bit 1: B; 0 default, -1 none: CORE_T1)
  int amx_nxl;         // AMX prefill: most lines of the next call's weights prefetched per step (<= 0: none)
  const char* nx;      // AMX prefill: the next call's weight bytes (set by the caller per call; NULL: none)
  int64_t nxb;         // ... and their length
  int c_nt;            // AMX prefill: write C with non-temporal stores (C 64-byte aligned, ldc*4 a multiple of 64)
  int c_bf16;          // AMX prefill: C is bf16 (uint16_t, ldc elements apart), rounded as kt_*_f32_to_bf16
  int dec_pf;          // one-token decode (int8/int4/bf16 panels): prefetch this many bytes ahead (<= 0: none)
  // AMX prefill over a K slab (k_end > 0): the call runs tile steps
  // [k_beg, k_end) only (even step counts), starting from zero (k_first) or
  // from the sums parked at park by the call over the slab before, and
  // finishing into C (k_last) or parking its sums at park (rows of KT_NB
  // values, m rows, f32 or int32) for the next slab. k_end == 0: the whole
  // K, C from zero into C, parking (K blocks) in ci.
  int k_beg, k_end, k_first, k_last;
  void* park;
  int i4_kch;  // AMX int4 prefill: int8 tile steps unpacked and run at a time (even; <= 0: the whole K at once)
  int i4_pf;      // AMX int4 prefill: the unpack prefetches its int4 panels this many bytes ahead (<= 0: none)
  int i4g_pf;     // ... group-wise int4 panels
  int i4f_pf;     // ... calls with the fused unpack (i4_fuse), both formats
  int i4_fuse;    // AMX int4 prefill: calls of at most this many tokens unpack block by block inside the tile loop (CORE_FN4)
  int i4_fuse1;   // ... longer calls: the unpack fused with their first 32 tokens, into the whole panels (amx_i4_run); bit 0 AMXINT4, bit 1 INT4_KGROUP
  int32_t* gsum;  // group-wise int4 kernels (VNNI, AVX2): KT_GSUM_TOK tokens' activation sums per group (kt_gsum)
  float wsc[32];  // AMX group-wise int4 prefill: the row scales of the call's requantized panels (KT_NB rows)
  // One-token decode side stream (cfg.miss_pf): the AVX-512 int8/int4 panel
  // kernels prefetch into L2 one line of it per 128 weight bytes they read
  // (kt_side_pf), so the blocks a worker runs later (the experts the
  // prediction missed) come from memory while it runs the prefetched ones
  // from the caches. The lines [sd, sd_end), then the ranges sd_rng[2i] ..
  // sd_rng[2i+1] for sd_i <= i < sd_n.
  const char *sd, *sd_end;
  const int64_t* sd_rng;
  int sd_i, sd_n;
} kt_scratch;

// kt_side_pf prefetches the next line of s's side stream into L2, if any.
static inline void kt_side_pf(kt_scratch* s) {
  if (s->sd >= s->sd_end) {
    if (s->sd_i >= s->sd_n) return;
    s->sd = (const char*)(intptr_t)s->sd_rng[2 * s->sd_i];
    s->sd_end = (const char*)(intptr_t)s->sd_rng[2 * s->sd_i + 1];
    s->sd_i++;
  }
  _mm_prefetch(s->sd, _MM_HINT_T1);
  s->sd += 64;
}

#define KT_NB 32     // weight rows per work item (two 16-row panels)

// panel_bytes is the bytes of one 16-row panel of a packed matrix of k
// columns in format fmt (0: not a packed format).
static inline int64_t panel_bytes(int fmt, int64_t k) {
  switch (fmt) {
    case KT_FMT_I4_PK:
    case KT_FMT_I4G_PK:
      return 8 * k;
    case KT_FMT_I8_PK:
      return 16 * k;
    case KT_FMT_BF16_PK:
      return 32 * k;
  }
  return 0;
}
// kt_pf_gscales asks for the 64-byte lines of groups [g0, g1) of a
// group-wise int4 panel's bf16 scales gs ([group][16], 32 bytes a group).
static inline void kt_pf_gscales(const uint16_t* gs, int64_t g0, int64_t g1) {
  for (int64_t g = g0 & ~(int64_t)1; g < g1; g += 2) _mm_prefetch((const char*)(gs + g * 16), _MM_HINT_T0);
}
#define KT_MCH 512   // most tokens per kernel call in prefill (scratch size; kt_engine_config.mch picks)
#define KT_DEC_M 8   // tokens per pass of the line kernels
#define KT_GSUM_TOK 32  // tokens whose activation sums per group kt_scratch.gsum holds

// kt_gsum stores, for each of the m int8 activation rows x + t*ld, the sums
// of its k/group groups of columns (group a multiple of 32) at
// out + t*(k/group): what the group-wise int4 kernels, whose panels hold
// unsigned codes (the value + 8), take back out of their sums (8 or 128
// times, by the codes' scaling).
void kt_gsum(const int8_t* x, int64_t ld, int m, int k, int group, int32_t* out);

// C[i*ldc + j] = sum_k W[n0+j][k] * A[i][k], i < m, j < nn (nn multiple of 16, <= KT_NB).
typedef void (*kt_kernel)(const kt_mat* W, int n0, int nn, const kt_act* A, int m, float* C,
                          int ldc, kt_scratch* s);

// Kernel lookup: returns NULL when (fmt, isa level) has no kernel.
// level: KT_ISA_AVX2, KT_ISA_AVX512 (uses VNNI/BF16 bits in isa), KT_ISA_AMX
// (the emulated tile kernels when isa has KT_ISA_AMX_EMU).
kt_kernel kt_pick_kernel(int fmt, int level, int isa);
int kt_act_format(int fmt, int isa);

// silu(g)*u over n floats into h.
void kt_silu_mul(const float* g, const float* u, float* h, int n, int isa);

// Expert LoRA (kern_lora.c), called by the engine's work items (engine_phases.c, engine_decode.c).
void kt_lora_begin(const kt_lora* lo, const int* active, int nactive, int npools);
void kt_lora_gate_up(const kt_lora* lo, const kt_batch* b, const int* slot_tok, int pool, int x, int off, int m, int s0,
                     int mm, int n0, float* cg, float* cu, int ldc, int H);
// kt_lora_down adds to the outputs of expert x's slots [off, off+m), hidden
// rows [n0, n0+nn): Y points at slot 0's row n0, rows ldy floats apart.
void kt_lora_down(const kt_lora* lo, int pool, int x, int off, int m, int n0, int nn, const float* Hf, int I, float* Y,
                  int ldy);

// Conversions of activation rows (portable reference; the engine uses the ISA versions).
void kt_row_to_act(const void* src, int src_bf16, int k, int act, void* dst, float* scale);
void kt_avx2_row_to_act(const void* src, int src_bf16, int n, int act, void* dst, float* scale, float* tmp);
void kt_avx512_row_to_act(const void* src, int src_bf16, int n, int act, void* dst, float* scale, float* tmp);
void kt_avx2_merge(const void* const* parts, int parts_bf16, const float* w, int np, int n, void* out, int out_bf16,
                   int incr, int nt, float* tmp);
void kt_avx512_merge(const void* const* parts, int parts_bf16, const float* w, int np, int n, void* out, int out_bf16,
                     int incr, int nt, float* tmp);
void kt_avx2_rows_bf16(const float* src, int rows, int n, int lds, uint16_t* dst, int64_t ldd, int nt);
void kt_avx512_rows_bf16(const float* src, int rows, int n, int lds, uint16_t* dst, int64_t ldd, int nt);

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
void kt_amx_i4gpk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
// The same kernels over emulated tiles (kern_amx_emu.c; KT_ISA_AMX_EMU, tests).
void kt_amx_emu_bf16pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_amx_emu_i8pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_amx_emu_i4pk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);
void kt_amx_emu_i4gpk(const kt_mat*, int, int, const kt_act*, int, float*, int, kt_scratch*);

// The candidate int4 group scales of kt_pack_i4g and their squared errors
// (pack.c scale4_errs), the nine in the lanes of one vector: the same bits.
int kt_avx512_scale4_errs(const float* x, int n, float amax, float* s9, float* e9);
int kt_scale4_errs(const float* x, int n, int vec, float* s9, float* e9);

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
