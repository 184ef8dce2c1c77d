// kern_amx_core.h: the body of the AMX prefill kernels, written once over
// tile-operation macros. kern_amx.c includes it with the AMX instructions;
// kern_amx_emu.c includes it with a scalar emulation of the tiles, so the
// loop structure, the addressing and every knob (K blocking, prefetch, the
// next-panel L2 prefetch, non-temporal C) are tested on CPUs without AMX
// (TestAMXCoreEmulated). The including file defines, before each inclusion:
//   CORE_FN    the function name
//   CORE_ATTR  its attributes (target)
//   CORE_INT   1: int8 x int8 -> int32 tiles, scaled per row of W and per
//              token at the end; 0: bf16 x bf16 -> f32 tiles
//   TZERO(t), TLOAD(t, p, stride), TLOAD_T1(t, p, stride) (a load with the
//   T1 hint, tileloaddt1), TSTORE(t, p, stride), TDP(c, a, b)
// and once per file, before the first inclusion, KT_CORE_HELPER_ATTR.
//
// Tiles 0-3 are the accumulators (C), 4-5 A (tokens), 6-7 B (weights).
//
// The kernel computes C[i*ldc + j] = sum_k W[j][k] * A[i][k] for i < m and
// j < nn (nn a multiple of 16, at most 32): w points at the first 16-row
// panel of the call, each panel is nkc steps of one 1 KiB B tile. C rows are
// written in blocks of 16 (room for round_up(m, 16) rows); A must be
// readable for round_up(m, 32) rows (the engine pads every expert to 32
// slots) and is addressed through kt_act_layout (kt_internal.h).
//
// K slabs (s->k_end > 0): the caller runs the K steps in slabs, each over
// all of a group of weight-row blocks before the next slab, so that the
// activations of one slab stay in L2 across the group's calls where a call's
// whole activation block would not (K 7168: 128 bf16 rows are 1.8 MiB). The
// sums are parked between slabs at s->park exactly as between K blocks.
//
// K blocking (s->amx_kch): the K steps are cut into blocks; for each block
// the B pair (2*kch KiB) stays in L1 while every 32-token block passes over
// it. The accumulators of all token blocks (m x 32 values, up to 64 KiB) are
// parked in s->ci between K blocks: f32 or int32 values stored and reloaded
// exactly, and every C tile sees the same tile products in the same order
// as without blocking, so the results are bitwise those of a single pass.
//
// Prefetch into L1 (s->amx_pf steps ahead, s->amx_pfm: bit 0 the A tiles,
// bit 1 the B tiles): AMX tile registers are not renamed, so the loads of
// the next step wait for the products that still read those tiles and the
// load latency is exposed.
//
// Prefetch into L2 of the next call's weights (s->nx, s->nxb bytes): the
// caller knows which panel pair comes next (the up projection after the
// gate, the next 32 rows); its lines are requested a few per step over this
// call (at most s->amx_nxl per step, so a short call does not flood the
// line fill buffers), so the next call's first token block does not wait
// for memory.

#ifndef KT_CORE_HELPERS
#define KT_CORE_HELPERS
static inline int amx_kblock(const kt_scratch* s, int nkc) {
  int kb = s->amx_kch > 0 ? s->amx_kch : nkc;
  return kb < nkc ? kb : nkc;
}

static inline void amx_pf_tile(const char* p, int64_t stride) {
  for (int r = 0; r < 16; r++) _mm_prefetch(p + r * stride, _MM_HINT_T0);
}

// amx_stream_rows copies rows of 16 or 32 floats from the parked
// accumulators (row stride KT_NB) to C with non-temporal stores: the down
// projection's per-slot outputs are read back only by the merge, so writing
// them around the caches saves the read-for-ownership of every line.
static inline KT_CORE_HELPER_ATTR void amx_stream_rows(const float* t, float* C, int ldc, int rows, int two_n) {
  for (int i = 0; i < rows; i++) {
    _mm512_stream_ps(C + (int64_t)i * ldc, _mm512_loadu_ps(t + i * KT_NB));
    if (two_n) _mm512_stream_ps(C + (int64_t)i * ldc + 16, _mm512_loadu_ps(t + i * KT_NB + 16));
  }
}

// amx_bf16_vec rounds 16 floats to bf16 by the rule of kt_f2bf and convert.h
// f32_to_bf16 (to nearest even, NaN kept NaN), in registers: the down
// kernels round their parked sums without an f32 copy. TestDownKernelRoundsBitwise
// holds it to f32_to_bf16.
static inline KT_CORE_HELPER_ATTR __m256i amx_bf16_vec(__m512 f) {
  __m512i v = _mm512_castps_si512(f);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(0x7fff)), odd), 16);
  __m512i nan = _mm512_or_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(0x40));
  __mmask16 isnan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, isnan, nan));
}

// amx_bf16_rows stores parked sums (rows of 16, or 32 when two_n; row
// stride KT_NB) as bf16 rows of C, ldc elements apart: int32 sums scaled
// first exactly as amx_scale_rows scales them (wscale non-NULL), f32 sums as
// they are. The down projection's slot outputs so take one pass from the
// tiles instead of an f32 copy that a second pass rounds. nt: 32-value rows
// on 64-byte boundaries (one whole line each) go around the caches.
static inline KT_CORE_HELPER_ATTR void amx_bf16_rows(const void* t, const float* wscale, const float* as, uint16_t* C,
                                                    int ldc, int rows, int two_n, int nt) {
  for (int i = 0; i < rows; i++) {
    __m256i h[2];
    for (int q = 0; q < 1 + two_n; q++) {
      __m512 f;
      if (wscale) {
        f = _mm512_cvtepi32_ps(_mm512_loadu_si512((const int32_t*)t + i * KT_NB + q * 16));
        f = _mm512_mul_ps(_mm512_mul_ps(f, _mm512_loadu_ps(wscale + q * 16)), _mm512_set1_ps(as[i]));
      } else {
        f = _mm512_loadu_ps((const float*)t + i * KT_NB + q * 16);
      }
      h[q] = amx_bf16_vec(f);
    }
    uint16_t* c = C + (int64_t)i * ldc;
    if (two_n && nt && ((uintptr_t)c & 63) == 0) {
      _mm512_stream_si512((__m512i*)c, _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1));
      continue;
    }
    _mm256_storeu_si256((__m256i*)c, h[0]);
    if (two_n) _mm256_storeu_si256((__m256i*)(c + 16), h[1]);
  }
}

// amx_scale_rows turns parked int32 sums into f32: C = sum * wscale[j] * as[i].
static inline KT_CORE_HELPER_ATTR void amx_scale_rows(const int32_t* t, const float* wscale, const float* as, float* C,
                                                     int ldc, int rows, int cols, int nt) {
  for (int i = 0; i < rows; i++) {
    __m512 a = _mm512_set1_ps(as[i]);
    for (int j = 0; j < cols; j += 16) {
      __m512 f = _mm512_cvtepi32_ps(_mm512_loadu_si512(t + i * KT_NB + j));
      f = _mm512_mul_ps(_mm512_mul_ps(f, _mm512_loadu_ps(wscale + j)), a);
      if (nt)
        _mm512_stream_ps(C + (int64_t)i * ldc + j, f);
      else
        _mm512_storeu_ps(C + (int64_t)i * ldc + j, f);
    }
  }
}
#endif

// CORE_LOAD_BLOCK starts the accumulator tiles of a token block (tiles 0-1,
// and 2-3 when tm): zero on the first K block, else the sums parked at t.
#define CORE_LOAD_BLOCK(tm)                                                                                        \
  do {                                                                                                             \
    if (first) {                                                                                                   \
      TZERO(0);                                                                                                    \
      TZERO(1);                                                                                                    \
      TZERO(2);                                                                                                    \
      TZERO(3);                                                                                                    \
    } else {                                                                                                       \
      TLOAD(0, t, la);                                                                                             \
      if (two_n) TLOAD(1, t + 64, la);                                                                             \
      if (tm) {                                                                                                    \
        TLOAD(2, t + 16 * la, la);                                                                                 \
        if (two_n) TLOAD(3, t + 16 * la + 64, la);                                                                 \
      }                                                                                                            \
    }                                                                                                              \
  } while (0)

// CORE_T1 is the tiles that load with the T1 hint (bit 0 A, bit 1 B):
// s->amx_t1 when set (> 0), none for -1, and by default (0) the bf16
// kernels' B tiles, the weights, which each core reads from L2 once per
// 32-token block (on the AMX machine, Qwen3-30B at 4096 tokens: AMXBF16
// faster in 20 of 24 alternated pairs, medians 4-8 % lower; the int8 core
// and Qwen3.5's bf16 shapes showed no order, so they keep plain loads).
#define CORE_T1(s) ((s)->amx_t1 > 0 ? (s)->amx_t1 : (s)->amx_t1 == 0 && !CORE_INT ? 2 : 0)

// CORE_LOAD loads tile t from p with the T1 hint where hint is set
// (s->amx_t1: operands streamed through the caches, which the hint asks
// the core not to keep close), else plainly. The hint changes no value.
#define CORE_LOAD(hint, t, p, stride)                                                                              \
  do {                                                                                                             \
    if (hint)                                                                                                      \
      TLOAD_T1(t, p, stride);                                                                                      \
    else                                                                                                           \
      TLOAD(t, p, stride);                                                                                         \
  } while (0)

// CORE_STEP runs tile step kc of a 2x2 block: the A tiles of its token
// rows (a0, and a1 when two_m) times the B tiles bt0 (and bt1 when two_n)
// into the accumulator tiles 0-3, each operand loaded once (t1a, t1b: with
// the T1 hint).
#define CORE_STEP(kc, bt0, bt1)                                                                                    \
  do {                                                                                                             \
    CORE_LOAD(t1a, 4, a0 + (kc) * L.step, L.stride);                                                               \
    CORE_LOAD(t1b, 6, (bt0), 64);                                                                                  \
    TDP(0, 4, 6);                                                                                                  \
    if (two_n) {                                                                                                   \
      CORE_LOAD(t1b, 7, (bt1), 64);                                                                                \
      TDP(1, 4, 7);                                                                                                \
    }                                                                                                              \
    if (two_m) {                                                                                                   \
      CORE_LOAD(t1a, 5, a1 + (kc) * L.step, L.stride);                                                             \
      TDP(2, 5, 6);                                                                                                \
      if (two_n) TDP(3, 5, 7);                                                                                     \
    }                                                                                                              \
  } while (0)

// CORE_STORE_BLOCK stores the accumulator tiles of the token block at i0
// (tiles 0-1, and 2-3 when tm: its second 16 rows) into the parked
// accumulators t, or after the last K block into C: int32 sums scaled per
// weight row and token, f32 sums stored straight or streamed.
#if CORE_INT
#define CORE_STORE_BLOCK(tm)                                                                                       \
  do {                                                                                                             \
    TSTORE(0, t, la);                                                                                              \
    if (two_n) TSTORE(1, t + 64, la);                                                                              \
    if (tm) {                                                                                                      \
      TSTORE(2, t + 16 * la, la);                                                                                  \
      if (two_n) TSTORE(3, t + 16 * la + 64, la);                                                                  \
    }                                                                                                              \
    if (last && s->c_bf16)                                                                                         \
      amx_bf16_rows(t, wscale + p * 16, A->as + i0, (uint16_t*)C + (int64_t)i0 * ldc + p * 16, ldc, rows, two_n,   \
                    s->c_nt);                                                                                      \
    else if (last)                                                                                                 \
      amx_scale_rows((const int32_t*)t, wscale + p * 16, A->as + i0, C + (int64_t)i0 * ldc + p * 16, ldc, rows,    \
                     two_n ? 32 : 16, s->c_nt);                                                                    \
  } while (0)
#else
#define CORE_STORE_BLOCK(tm)                                                                                       \
  do {                                                                                                             \
    char* c = t;                                                                                                   \
    int lc = la;                                                                                                   \
    if (last && !s->c_nt && !s->c_bf16) {                                                                          \
      c = (char*)(C + (int64_t)i0 * ldc + p * 16);                                                                 \
      lc = ldc * 4;                                                                                                \
    }                                                                                                              \
    TSTORE(0, c, lc);                                                                                              \
    if (two_n) TSTORE(1, c + 64, lc);                                                                              \
    if (tm) {                                                                                                      \
      TSTORE(2, c + 16 * (int64_t)lc, lc);                                                                         \
      if (two_n) TSTORE(3, c + 16 * (int64_t)lc + 64, lc);                                                         \
    }                                                                                                              \
    if (last && s->c_bf16)                                                                                         \
      amx_bf16_rows(t, NULL, NULL, (uint16_t*)C + (int64_t)i0 * ldc + p * 16, ldc, rows, two_n, s->c_nt);          \
    else if (last && s->c_nt)                                                                                      \
      amx_stream_rows((const float*)t, C + (int64_t)i0 * ldc + p * 16, ldc, rows, two_n);                          \
  } while (0)
#endif

static CORE_ATTR void CORE_FN(const char* w, int nkc, const float* wscale, const kt_act* A, int esz, int m, float* C,
                              int ldc, int nn, kt_scratch* s) {
  const char* X = (const char*)A->a;
  kt_alayout L = kt_act_layout(A, esz);
  int kb = amx_kblock(s, nkc), pfd = s->amx_pf;
  int pfa = pfd > 0 && (s->amx_pfm & 1), pfb = pfd > 0 && (s->amx_pfm & 2);
  const int t1 = CORE_T1(s), t1a = t1 & 1, t1b = t1 & 2;
  const int64_t pst = (int64_t)nkc * 1024;  // bytes per 16-row panel
  // the K range of this call: a slab of it (s->k_end > 0) or all of it
  int slab = s->k_end > 0;
  int kbeg = slab ? s->k_beg : 0, kend = slab ? s->k_end : nkc;
  int kfirst = slab ? s->k_first : 1, klast = slab ? s->k_last : 1;
  char* acc = (char*)(slab ? s->park : s->ci);  // [m][KT_NB] f32 or int32
  const int la = KT_NB * 4;
  // next-call L2 prefetch: nper lines per tile step spread over the call
  const char* nxp = s->nx;
  const char* nxe = nxp ? nxp + s->nxb : NULL;
  int nper = 0;
  if (nxp && s->nxb > 0 && s->amx_nxl > 0) {
    int64_t steps = (int64_t)((nn / 16 + 1) / 2) * ((m + 31) / 32) * (kend - kbeg);
    nper = (int)((s->nxb / 64 + steps - 1) / (steps > 0 ? steps : 1));
    if (nper > s->amx_nxl) nper = s->amx_nxl;
  }
  for (int p = 0; p < nn / 16; p += 2) {
    int two_n = p + 1 < nn / 16;
    const char* b0 = w + (int64_t)p * pst;
    const char* b1 = b0 + pst;
    for (int c0 = kbeg; c0 < kend; c0 += kb) {
      int c1 = c0 + kb < kend ? c0 + kb : kend;
      int first = c0 == kbeg && kfirst, last = c1 == kend && klast;
      for (int i0 = 0; i0 < m; i0 += 32) {
        int two_m = m - i0 > 16;
        const char* a0 = X + (int64_t)(i0 / 32) * L.blk32;
        const char* a1 = a0 + L.a1;
        char* t = acc + (int64_t)i0 * la;
        CORE_LOAD_BLOCK(two_m);
        for (int kc = c0; kc < c1; kc++) {
          int kp = kc + pfd;
          if (kp < nkc) {
            if (pfa) {
              amx_pf_tile(a0 + kp * L.step, L.stride);
              if (two_m) amx_pf_tile(a1 + kp * L.step, L.stride);
            }
            if (pfb) {
              amx_pf_tile(b0 + (int64_t)kp * 1024, 64);
              if (two_n) amx_pf_tile(b1 + (int64_t)kp * 1024, 64);
            }
          }
          for (int q = 0; q < nper && nxp < nxe; q++, nxp += 64) _mm_prefetch(nxp, _MM_HINT_T1);
          CORE_STEP(kc, b0 + (int64_t)kc * 1024, b1 + (int64_t)kc * 1024);
        }
        int rows = m - i0 < 32 ? m - i0 : 32;
        CORE_STORE_BLOCK(two_m);
      }
    }
  }
}

#if CORE_INT && defined(CORE_FN4)
// CORE_FN4 is the int4 prefill kernel with the unpack fused into the tile
// loop, for calls of few tokens (amx_i4_run: at most s->i4_fuse). Where
// amx_i4_run unpacks the call's whole panels (64 KiB at K 2048) and then
// runs the int8 core over them, with no tile work while the unpack waits
// for memory and none of the unpack's loads while the tiles run, this
// kernel unpacks one 128-column block of the panel pair at a time
// (amx_i4_block: int8 tile steps 2c and 2c+1) into a two-block ring in
// s->pack (8 KiB, stays in L1), one block ahead of the tile products that
// read it, so the unpack's memory reads and vector work overlap the
// products of the block before. Each 32-token block of the call unpacks
// the pair again (the later passes read the int4 panels from L2). Same
// products in the same order on the same int8 values as the
// unpack-then-core path, so the results are bitwise the same
// (TestAMXInt4Fused). K slabs as in CORE_FN; K blocking (amx_kch) does
// not apply.
//
// full != NULL: the blocks are unpacked at their places in full (the
// KT_FMT_I8_PK layout of amx_i4_unpack, 16*K bytes per panel) instead of
// the ring, so that the int8 core can run the call's later token blocks
// over them (amx_i4_run); the call then passes only its first 32 tokens.
// The unpack prefetches its int4 lines s->i4f_pf bytes ahead. rmax: grouped
// panels' per-row requantization scale (NULL: per-row int4); wscale: the
// int8 core's row scales.
static CORE_ATTR void CORE_FN4(const kt_mat* W, int n0, int nn, const float* rmax, const float* wscale,
                               const kt_act* A, int m, float* C, int ldc, kt_scratch* s, int8_t* full) {
  const char* X = (const char*)A->a;
  kt_alayout L = kt_act_layout(A, 1);
  const int k = W->k, nkc = k / 64, ng = rmax ? k / W->group : 0;
  const int pfd = s->amx_pf, pfa = pfd > 0 && (s->amx_pfm & 1);
  const int t1 = CORE_T1(s), t1a = t1 & 1, t1b = t1 & 2;
  const int upf = s->i4f_pf;
  int slab = s->k_end > 0;
  int kbeg = slab ? s->k_beg : 0, kend = slab ? s->k_end : nkc;
  int first = slab ? s->k_first : 1, last = slab ? s->k_last : 1;
  char* acc = (char*)(slab ? s->park : s->ci);  // [m][KT_NB] int32
  const int la = KT_NB * 4;
  int8_t* ring = (int8_t*)s->pack;  // [block & 1][panel][lo, hi][1 KiB]
  const int64_t pstr = full ? 16 * (int64_t)k : 2048;  // panel 1's tiles after panel 0's
  for (int p = 0; p < nn / 16; p += 2) {
    int two_n = p + 1 < nn / 16;
    const uint8_t* src[2];
    const uint16_t* sc[2] = {NULL, NULL};
    __m512 rm[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int q = 0; q < 1 + two_n; q++) {
      src[q] = W->w + (int64_t)(n0 / 16 + p + q) * 8 * k;
      if (rmax) {
        sc[q] = W->gscale + (int64_t)(n0 / 16 + p + q) * ng * 16;
        rm[q] = _mm512_loadu_ps(rmax + (p + q) * 16);
      }
    }
    for (int i0 = 0; i0 < m; i0 += 32) {
      int two_m = m - i0 > 16, rows = m - i0 < 32 ? m - i0 : 32;
      char* t = acc + (int64_t)i0 * la;
      const char* a0 = X + (int64_t)(i0 / 32) * L.blk32;
      const char* a1 = a0 + L.a1;
      CORE_LOAD_BLOCK(two_m);
      int cend = (kend + 1) / 2;  // blocks [kbeg/2, cend)
      // each pass unpacks the block after its own into the other half of the
      // ring, then runs its own block's tile steps (the first pass only unpacks)
      for (int c = kbeg / 2 - 1; c < cend; c++) {
        if (c + 1 < cend) {
          int8_t* d = full ? full + (int64_t)(c + 1) * 2048 : ring + ((c + 1) & 1) * 4096;
          for (int q = 0; q < 1 + two_n; q++)
            amx_i4_block(src[q], c + 1, sc[q], rm[q], W->group, upf, d + q * pstr, d + q * pstr + 1024);
        }
        if (c < kbeg / 2) continue;
        const int8_t* b = full ? full + (int64_t)c * 2048 : ring + (c & 1) * 4096;
        int s0 = 2 * c > kbeg ? 2 * c : kbeg, s1 = 2 * c + 2 < kend ? 2 * c + 2 : kend;
        for (int kc = s0; kc < s1; kc++) {
          const int8_t* bt = b + (kc & 1) * 1024;
          if (pfa && kc + pfd < nkc) {
            amx_pf_tile(a0 + (kc + pfd) * L.step, L.stride);
            if (two_m) amx_pf_tile(a1 + (kc + pfd) * L.step, L.stride);
          }
          CORE_STEP(kc, bt, bt + pstr);
        }
      }
      CORE_STORE_BLOCK(two_m);
    }
  }
}
#endif

#undef CORE_STORE_BLOCK
#undef CORE_LOAD_BLOCK
#undef CORE_STEP
#undef CORE_LOAD
#undef CORE_T1
