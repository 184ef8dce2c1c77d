// engine_phases.c: the phases of one MoE layer on the barrier-phased path.
//
// A task runs as five phases. Phases 1-4 run inside each pool on that pool's
// slice of every expert's intermediate dimension (NUMA tensor parallelism);
// phase 5 sums the pools' partial outputs. Within a phase, threads take work
// items from an atomic counter (work stealing). Every output element is
// produced by exactly one item with a fixed summation order (experts
// order, then pools), so results do not depend on the thread count or on
// which thread ran what.
//
//   1. pack: each routed (token, expert) slot's activation row, converted to the
//      kernel's activation format, grouped by expert (padded to 32 rows)
//   2. gate/up: per (expert, 32-128 intermediate rows): h = silu(gate x) * up x;
//      bf16 activations: h is stored converted at once; otherwise
//   3. the last gate/up item of an expert quantizes its h rows (no barrier)
//   4. down: per (expert, hidden rows): Y_p[slot] = down h[slot]
//   5. merge: out[t] = (incremental ? out[t] : 0) + sum over the token's
//      slots (top-k order) and pools (pool order) of w * Y_p[slot]
#define _GNU_SOURCE
#include "kt_engine.h"

#define PACK_RM(W, n0, nn, dst)               \
  do {                                        \
    if (e->isa & KT_ISA_AVX512)               \
      kt_avx512_pack_rm((W), (n0), (nn), (dst)); \
    else                                      \
      kt_pack_rm_to_bf16pk((W), (n0), (nn), (dst)); \
  } while (0)

// kt_put_act_row converts a row of n elements (f32, or bf16 when src_bf16) to
// the activation format and stores it as row s of buf, in tile order when
// tiled.
void kt_put_act_row(kt_engine* e, kt_worker* w, const void* src, int src_bf16, int n, int act, char* buf, int64_t s,
                        float* scale, int tiled) {
  int64_t rb = (int64_t)n * act_size(act);
  if (!tiled) {
    ROW_TO_ACT(src, src_bf16, n, act, buf + s * rb, scale, w->s.row);
    return;
  }
  ROW_TO_ACT(src, src_bf16, n, act, w->trow, scale, w->s.row);
  kt_put_row(buf, s, rb, w->trow, 1);
}

// pair_bytes returns where weight rows [n0, n0+32) of W start in the packed
// formats the AMX kernels read, and their length, or NULL (other formats,
// rows past the end): what a kernel call prefetches into L2 for the next.
static const char* pair_bytes(const kt_engine* e, const kt_mat* W, int n0, int64_t* nb) {
  int64_t per16 = panel_bytes(e->l->fmt, W->k);
  if (n0 < 0 || n0 + KT_NB > W->n || !e->pf_tiled || e->rm_pack || !per16) return NULL;
  *nb = 2 * per16;
  return (const char*)W->w + (int64_t)(n0 / 16) * per16;
}

// set_nx tells the next kernel call which weights follow it (NULL: none).
static inline void set_nx(kt_engine* e, kt_worker* w, const kt_mat* W, int n0, int on) {
  w->s.nx = on ? pair_bytes(e, W, n0, &w->s.nxb) : NULL;
  w->s.amx_nxl = e->nxl;
}

// gather_rows copies the converted token rows of slots [s0, s0+m) into the
// worker's xa in tile order (slot s0+i as row i) and their scales into xas.
// The phased AMX prefill of an expert with at most xa_rows(e, act) tokens
// reads its activations from there (blk_tiled 2): each gate/up item gathers the
// expert's rows once, from the converted rows (Xt, a few MB, cache-hot),
// into memory it keeps in L2, instead of a phase that first writes a
// slot-ordered copy of every routed row (134 MB for 4096 tokens of
// Qwen3-30B in bf16) which every gate/up item of the expert then reads back
// from memory. The kernels read round_up(m, 32) rows; rows past m keep
// earlier values and only feed outputs that are not stored.
static void gather_rows(kt_engine* e, kt_worker* w, kt_pool* P, int s0, int m, int64_t rb) {
  for (int i = 0; i < m; i++) {
    int t = e->slot_tok[s0 + i];
    kt_put_row(w->xa, i, rb, P->xin + (int64_t)t * rb, 1);
    w->xas[i] = P->Xts[t];
  }
}

// chunk_act is the activations of slot rows [off+m0, ...) of an expert for a
// gate/up kernel call: the worker's gathered copy (local, gather_rows) or
// the pool's slot-ordered rows.
static inline kt_act chunk_act(kt_worker* w, kt_pool* P, int off, int m0, int H, int64_t asz, int tiled, int local) {
  kt_act A = {(const char*)P->X + (int64_t)(off + m0) * H * asz, H, P->Xs + off + m0, tiled};
  if (local) {
    A.a = w->xa + (int64_t)m0 * H * asz;
    A.as = w->xas + m0;
  }
  return A;
}

// gate_up_store finishes intermediate rows [n0, n0+KT_NB) of the chunk of
// expert x's slot rows [m0, m0+mm) from gate·x and up·x in the worker's cg
// and cu: the expert LoRA's corrections, then h = silu(g) ⊙ u stored as the
// down projection reads it (tiled: tile order).
static void gate_up_store(kt_engine* e, kt_worker* w, kt_pool* P, int x, int m0, int mm, int n0, int H, int I,
                          int tiled) {
  int m = e->cnt[x], off = e->off[x];
  int hdirect = P->act == KT_ACT_BF16;
  if (e->l->lora)  // expert LoRA (kern_lora.c): g, u += s·B(A x)
    kt_lora_gate_up(e->l->lora, &e->b, e->slot_tok, w->pool, x, off, m, off + m0, mm, n0, w->cg, w->cu, KT_NB, H);
  int64_t rb = (int64_t)I * 2;
  for (int i = 0; i < mm; i++) {
    int64_t s = off + m0 + i;
    const float *g = w->cg + i * KT_NB, *u = w->cu + i * KT_NB;
    if (!hdirect && !e->hbf16) {  // f32 h, quantized by the expert's last item
      kt_silu_mul(g, u, P->Hf + s * I + n0, KT_NB, e->isa);
      continue;
    }
    // bf16 h: the down projection's activations (bf16), or h waiting in
    // Hf's memory for its int8 quantization in half the bytes (hbf16)
    char* dst = !hdirect ? (char*)((uint16_t*)P->Hf + s * I + n0)
                : tiled  ? kt_tiled_chunk((char*)P->Hq, s, rb, n0 / 32)
                         : (char*)P->Hq + s * rb + (int64_t)n0 * 2;
    kt_silu_mul(g, u, w->cd, KT_NB, e->isa);
    if (e->l->lora) memcpy(P->Hf + s * I + n0, w->cd, KT_NB * sizeof(float));  // f32 h for the LoRA down
    ROW_TO_ACT(w->cd, 0, KT_NB, KT_ACT_BF16, dst, &P->Hs[s], w->s.row);
  }
}

// kt_gate_up_block computes h = silu(gate·x) ⊙ up·x for intermediate rows
// [n0, n0+KT_NB) of expert x over all its slot rows, into P->Hf. Row-major
// weights are packed once for the block when the prefill kernel runs.
// With bf16 activations the conversion is per element, so the block's h is
// converted here and stored straight into P->Hq (its 32 bf16 values are one
// 64-byte column chunk of a tile-order row): no f32 h, no quantize pass.
void kt_gate_up_block(kt_engine* e, kt_worker* w, kt_pool* P, const kt_expert* xe, int x, int n0, int H, int I,
                          int64_t asz, int more) {
  int m = e->cnt[x], off = e->off[x];
  int pf = m >= e->pf_min;
  kt_kernel kern = pf ? e->kpf : e->kdec;
  const kt_mat *G = &xe->gate, *U = &xe->up;
  kt_mat PG, PU;
  int g0 = n0;
  if (pf && e->rm_pack) {  // row-major weights: pack this block's rows once, reuse for every token chunk
    PACK_RM(G, n0, KT_NB, (uint16_t*)w->s.pack);
    PACK_RM(U, n0, KT_NB, (uint16_t*)w->s.pack2);
    PG = *G;
    PG.w = (const uint8_t*)w->s.pack;
    PU = *U;
    PU.w = (const uint8_t*)w->s.pack2;
    G = &PG;
    U = &PU;
    g0 = 0;
  }
  int tiled = pf && e->pf_tiled;
  int local = e->blk_tiled[off >> 4] == 2;  // the item gathered the expert's rows into xa (gather_rows)
  w->s.c_nt = 0;  // C is this thread's scratch, in f32
  w->s.c_bf16 = 0;
  w->s.amx_kch = e->cfg.amx_kch;
  int mch = prefill_chunk(e, P->act);
  for (int m0 = 0; m0 < m; m0 += mch) {
    int mm = m - m0 < mch ? m - m0 : mch;
    kt_act A = chunk_act(w, P, off, m0, H, asz, tiled, local);
    int lastc = m0 + mm >= m;  // the next calls use other weights: prefetch them (L2)
    set_nx(e, w, U, g0, pf && lastc);
    kern(G, g0, KT_NB, &A, mm, w->cg, KT_NB, &w->s);
    set_nx(e, w, G, g0 + KT_NB, pf && lastc && more);
    kern(U, g0, KT_NB, &A, mm, w->cu, KT_NB, &w->s);
    w->s.nx = NULL;
    gate_up_store(e, w, P, x, m0, mm, n0, H, I, tiled);
  }
}

// gate_up_rows computes h for intermediate rows [r0, r1) of expert x
// (kt_gate_up_block per 32-row block).
// Where one prefill kernel call's activation rows exceed the slab size,
// the rows run in groups of blocks (as many as KT_PARK holds the parked
// gate and up sums of) and, within a group, K in slabs of at most half the
// slab size of activations, every block of the group over one slab before
// the next slab: each slab's activations are read from L2 by all the
// group's calls instead of each call streaming all its activations from
// L3. The sums of a block are parked between slabs exactly and every
// element sees the same products in the same order, so the results are
// bitwise those of whole-K calls (TestAMXKBlockBitwise).
static void gate_up_rows(kt_engine* e, kt_worker* w, kt_pool* P, const kt_expert* xe, int x, int r0, int r1, int H,
                         int I, int64_t asz) {
  int m = e->cnt[x], off = e->off[x];
  int mch = prefill_chunk(e, P->act);
  int mc = m < mch ? m : mch;
  int64_t abytes = (int64_t)mc * H * asz;  // activations of the largest call
  int nkc = (int)((int64_t)H * asz / 64);  // 1 KiB tile steps over K (bf16 32 columns, int8 64)
  int64_t slab = e->cfg.amx_slab != 0 ? e->cfg.amx_slab : KT_SLAB;
  if (m < e->pf_min || !kt_is_amx_kernel(e->kpf) || e->rm_pack || slab <= 0 || abytes <= slab || nkc < 4) {
    for (int n0 = r0; n0 < r1; n0 += KT_NB) kt_gate_up_block(e, w, P, xe, x, n0, H, I, asz, n0 + KT_NB < r1);
    return;
  }
  int nsl = (int)((2 * abytes + slab - 1) / slab);  // slabs of at most slab / 2 bytes
  int per = (nkc + nsl - 1) / nsl;
  per += per & 1;                                          // even: whole 128-column int4 blocks
  int64_t pblk = (int64_t)((mc + 31) / 32) * 32 * KT_NB * 4;  // one block's parked gate (or up) sums
  int grp = (int)(KT_PARK / (2 * pblk));
  if (e->cfg.amx_slab_grp > 0 && e->cfg.amx_slab_grp < grp) grp = e->cfg.amx_slab_grp;
  if (grp < 1) grp = 1;
  int tiled = e->pf_tiled;
  int local = e->blk_tiled[off >> 4] == 2;
  kt_kernel kern = e->kpf;
  w->s.c_nt = 0;
  w->s.c_bf16 = 0;
  w->s.amx_kch = e->cfg.amx_kch;
  w->s.nx = NULL;
  for (int m0 = 0; m0 < m; m0 += mch) {
    int mm = m - m0 < mch ? m - m0 : mch;
    kt_act A = chunk_act(w, P, off, m0, H, asz, tiled, local);
    for (int g0 = r0; g0 < r1; g0 += grp * KT_NB) {
      int g1 = g0 + grp * KT_NB < r1 ? g0 + grp * KT_NB : r1;
      for (int k0 = 0; k0 < nkc; k0 += per) {
        w->s.k_beg = k0;
        w->s.k_end = k0 + per < nkc ? k0 + per : nkc;
        w->s.k_first = k0 == 0;
        w->s.k_last = w->s.k_end == nkc;
        for (int n0 = g0; n0 < g1; n0 += KT_NB) {
          char* pk = w->park + (int64_t)((n0 - g0) / KT_NB) * 2 * pblk;
          w->s.park = pk;
          kern(&xe->gate, n0, KT_NB, &A, mm, w->cg, KT_NB, &w->s);
          w->s.park = pk + pblk;
          kern(&xe->up, n0, KT_NB, &A, mm, w->cu, KT_NB, &w->s);
          if (w->s.k_last) gate_up_store(e, w, P, x, m0, mm, n0, H, I, tiled);
        }
      }
    }
  }
  w->s.k_end = 0;
  w->s.park = NULL;
}

// kt_down_block computes y = down·h for hidden rows [h0, h0+r4) of expert x
// over all its slot rows, into P->Y at y_at (f32, or bf16 when e->ybf16:
// the kernel writes a chunk's f32 rows into the worker's cd, which are
// rounded into Y). Every output element comes from one kernel call over the
// full intermediate width, so the loop order does not change results.
void kt_down_block(kt_engine* e, kt_worker* w, kt_pool* P, const kt_expert* xe, int x, int h0, int r4, int H,
                       int I, int64_t asz) {
  int m = e->cnt[x], off = e->off[x];
  int pf = m >= e->pf_min;
  kt_kernel kern = pf ? e->kpfd : e->kdec;
  // phased path after a barrier: the slot outputs bypass the caches (the
  // fused path merges them soon and wants them cached); f32
  // outputs only from the AMX prefill kernels, which store through their
  // parked accumulators
  int ldy = y_ld(e);
  int ynt = !e->fused && !e->cfg.y_cached &&
            (e->ybf16 || (pf && e->pf_tiled && (H * 4) % 64 == 0 && !e->l->lora));
  // bf16 outputs: the AMX kernels round their sums straight into Y; the
  // others write f32 rows into the worker's cd, which rows_bf16 rounds
  int kbf16 = e->ybf16 && pf && kt_is_amx_kernel(kern);
  w->s.c_nt = kbf16 ? ynt : ynt && !e->ybf16;
  w->s.c_bf16 = kbf16;
  w->s.amx_kch = e->cfg.amx_kch_down;
  for (int n0 = h0; n0 < h0 + r4; n0 += KT_NB) {
    const kt_mat* D = &xe->down;
    kt_mat PD;
    int d0 = n0;
    if (pf && e->rm_pack) {  // row-major weights: pack each block once
      PACK_RM(D, n0, KT_NB, (uint16_t*)w->s.pack);
      PD = *D;
      PD.w = (const uint8_t*)w->s.pack;
      D = &PD;
      d0 = 0;
    }
    int mch = prefill_chunk(e, P->act);
    for (int m0 = 0; m0 < m; m0 += mch) {
      int mm = m - m0 < mch ? m - m0 : mch;
      kt_act A = {(const char*)P->Hq + (int64_t)(off + m0) * I * asz, I, P->Hs + off + m0, pf && e->pf_tiled};
      set_nx(e, w, D, d0 + KT_NB, pf && m0 + mm >= m && n0 + KT_NB < h0 + r4);
      char* y = y_at(e, P, off + m0, n0);
      if (!e->ybf16 || kbf16) {
        kern(D, d0, KT_NB, &A, mm, (float*)y, ldy, &w->s);
      } else {
        kern(D, d0, KT_NB, &A, mm, w->cd, KT_NB, &w->s);
        CONV_ISA(rows_bf16, w->cd, mm, KT_NB, KT_NB, (uint16_t*)y, ldy, ynt);
      }
      w->s.nx = NULL;
    }
    if (e->l->lora)  // y += s·B_d(A_d h)
      kt_lora_down(e->l->lora, w->pool, x, off, m, n0, KT_NB, P->Hf, I, (float*)y_at(e, P, 0, n0), ldy);
  }
  if (ynt) _mm_sfence();  // the merge (another thread, after a barrier) reads Y
}

// kt_merge_token writes out[t][h0:h0+n] = Σ w·Y over the token's slots (top-k
// order) and the pools (pool order), adding to out when incremental.
void kt_merge_token(kt_engine* e, kt_worker* w, int t, int h0, int n, int H) {
  const kt_batch* b = &e->b;
  int k = b->k, np = 0;
  for (int j = 0; j < k; j++) {
    int s = e->tok_slot[(int64_t)t * k + j];
    if (s < 0) continue;
    for (int p = 0; p < e->npools; p++) {
      w->parts[np] = y_at(e, &e->pools[p], s, h0);
      w->pw[np++] = e->slot_w[s];
    }
  }
  void* o = (char*)b->out + ((int64_t)t * H + h0) * (b->out_bf16 ? 2 : 4);
  // the phased path's outputs (a whole task's rows, read next by the
  // caller or a copy to the GPU) are stored around the caches
  int nt = !e->fused && !e->cfg.out_cached && !b->incremental && n % 32 == 0 && ((uintptr_t)o & 63) == 0;
  CONV_ISA(merge, w->parts, e->ybf16, w->pw, np, n, o, b->out_bf16, b->incremental, nt, w->s.row);
}

// kt_item_block is the rows per work item over n rows of every active expert:
// the largest of rmax, rmax/2, ... above KT_NB that divides n and still
// gives at least want items, else KT_NB.
int kt_item_block(const kt_engine* e, int n, int rmax, int64_t want) {
  for (int r = rmax; r > KT_NB; r /= 2)
    if (n % r == 0 && (int64_t)e->nactive * (n / r) >= want) return r;
  return KT_NB;
}

// Work items of the phased gate/up and down phases: an expert's rows (its
// intermediate rows for gate/up, hidden rows for down: n in all) in nb slices
// of r. Where the experts are compute-bound (64 tokens or more on average),
// the first experts are whole items (their activation rows read, or
// gathered, once instead of once per slice) and only the last 2 * nth are
// split, so that the threads still finish together (the split does not
// change results). whole_items is how many items are whole.
static int whole_items(const kt_engine* e, int nth, int nb) {
  if (nb < 2 || e->nslots < 64 * e->nactive || e->nactive <= 2 * nth) return 0;
  return e->nactive - 2 * nth;
}

// item_rows maps item to its expert and rows [*r0, *r1) and returns how
// many items that expert has.
static inline int item_rows(const kt_engine* e, int item, int whole, int nb, int r, int n, int* x, int* r0, int* r1) {
  if (item < whole) {
    *x = e->active[item], *r0 = 0, *r1 = n;
    return 1;
  }
  int j = item - whole;
  *x = e->active[whole + j / nb], *r0 = j % nb * r, *r1 = *r0 + r;
  return nb;
}

// kt_is_amx_kernel reports whether k is an AMX tile kernel (real or, in tests,
// emulated: KT_ISA_AMX_EMU), which reads tile-order activations and needs
// the tile state of its thread.
int kt_is_amx_kernel(kt_kernel k) {
  return k == kt_amx_bf16pk || k == kt_amx_i8pk || k == kt_amx_i4pk || k == kt_amx_i4gpk || k == kt_amx_emu_bf16pk ||
         k == kt_amx_emu_i8pk || k == kt_amx_emu_i4pk || k == kt_amx_emu_i4gpk;
}

void kt_run_job(kt_worker* w) {
  kt_engine* e = w->e;
  if (e->pfjob) {
    kt_run_prefetch_job(w);
    return;
  }
  if (e->fused) {
    kt_run_job_fused(w);
    return;
  }
  kt_pool* P = &e->pools[w->pool];
  const kt_layer* l = e->l;
  const kt_batch* b = &e->b;
  int H = l->hidden, I = l->inter_p[w->pool];
  int act = P->act;
  int64_t asz = act_size(act);
  const kt_expert* ex = l->ex + (int64_t)w->pool * l->nexp;
  int nth = P->nthreads;
  int item;

  // 1a. convert each token's row once (unless the task reads x as it is)
  int tchunks = P->xin == (const char*)P->Xt ? (e->ntok + 3) / 4 : 0;
  while ((item = atomic_fetch_add_explicit(&P->next[0].v, 1, memory_order_relaxed)) < tchunks) {
    for (int t = item * 4; t < item * 4 + 4 && t < e->ntok; t++) {
      const char* src = (const char*)b->x + (int64_t)t * H * (b->x_bf16 ? 2 : 4);
      ROW_TO_ACT(src, b->x_bf16, H, act, (char*)P->Xt + (int64_t)t * H * asz, &P->Xts[t], w->s.row);
    }
  }
  if (e->early)  // the queue thread (worker 0) joins when it has routed the task
    kt_barrier(e, &e->gbar_cnt, &e->gbar_gen, e->nthreads);
  else
    kt_barrier(e, &P->bar_cnt, &P->bar_gen, nth);
  int timer = w->global == 0;  // the queue thread times the phases
  if (timer) ph_mark(e, KT_PH_CONVERT);
  // 1b. copy rows into per-expert slot order
  int nchunks = (e->nslots + 15) / 16;
  while ((item = atomic_fetch_add_explicit(&P->next[1].v, 1, memory_order_relaxed)) < nchunks) {
    if (e->blk_tiled[item] == 2) continue;  // its gate/up items gather (gather_rows)
    for (int s = item * 16; s < item * 16 + 16 && s < e->nslots; s++) {
      int t = e->slot_tok[s];
      if (t < 0) continue;
      kt_put_row((char*)P->X, s, H * asz, P->xin + (int64_t)t * H * asz, e->blk_tiled[s >> 4]);
      P->Xs[s] = P->Xts[t];
    }
  }
  kt_barrier(e, &P->bar_cnt, &P->bar_gen, nth);
  if (timer) ph_mark(e, KT_PH_GATHER);

  // 2. gate/up + silu; items are (expert, r2 intermediate rows): long items
  // read (or gather, gather_rows) an expert's activations fewer times, as
  // long as every thread still gets ~8 items. 256-row items only where the
  // experts average 64 tokens or more (compute-bound; in the device A/B at
  // 512 tokens of Qwen3.5, 16 per expert, they were slower)
  int r2 = kt_item_block(e, I, e->nslots >= 64 * e->nactive ? 256 : 128, 8 * nth);
  int nb = I / r2, whole = whole_items(e, nth, nb);
  int items = whole + (e->nactive - whole) * nb;
  while ((item = atomic_fetch_add_explicit(&P->next[2].v, 1, memory_order_relaxed)) < items) {
    int x, r0, r1, nbx = item_rows(e, item, whole, nb, r2, I, &x, &r0, &r1);
    if (e->blk_tiled[e->off[x] >> 4] == 2) gather_rows(e, w, P, e->off[x], e->cnt[x], (int64_t)H * asz);
    gate_up_rows(e, w, P, &ex[x], x, r0, r1, H, I, asz);
    // 3. quantize h for the down projection (bf16: gate/up stored it
    // already): the last gate/up item of an expert converts its rows while
    // they are still in the caches and the other threads go on with gate/up
    if (act == KT_ACT_BF16 || atomic_fetch_add_explicit(&P->gud[x], 1, memory_order_acq_rel) + 1 != nbx) continue;
    for (int s = e->off[x]; s < e->off[x] + e->cnt[x]; s++)
      kt_put_act_row(e, w, h_row(e, P, s, I), e->hbf16, I, act, (char*)P->Hq, s, &P->Hs[s], e->blk_tiled[s >> 4]);
  }
  kt_barrier(e, &P->bar_cnt, &P->bar_gen, nth);
  if (timer) {
    ph_mark(e, KT_PH_GATEUP);
    ph_mark(e, KT_PH_QUANT);  // inside gate/up now
  }

  // 4. down: items are (expert, r4 hidden rows); Y[slot] = down(h[slot]) for this pool's slice
  int r4 = kt_item_block(e, H, 256, 4 * nth);
  int hb = H / r4;
  whole = whole_items(e, nth, hb);
  items = whole + (e->nactive - whole) * hb;
  while ((item = atomic_fetch_add_explicit(&P->next[4].v, 1, memory_order_relaxed)) < items) {
    int x, h0, h1;
    item_rows(e, item, whole, hb, r4, H, &x, &h0, &h1);
    kt_down_block(e, w, P, &ex[x], x, h0, h1 - h0, H, I, asz);
  }
  kt_barrier(e, &e->gbar_cnt, &e->gbar_gen, e->nthreads);
  if (timer) ph_mark(e, KT_PH_DOWN);

  // 5. out[t] = sum over the token's slots (k order) and pools (pool order) of w * Y
  while ((item = atomic_fetch_add_explicit(&e->gnext, 1, memory_order_relaxed)) < e->ntok) kt_merge_token(e, w, item, 0, H, H);
  _mm_sfence();  // the merge's stores around the caches are visible when the task completes
}

// ---------------------------------------------------------------- layout check

int kt_check_tile_layout(int rows, int rb) {
  if (rows < 1 || rb < 64 || rb % 64) return -1;
  int64_t nr = (rows + KT_TBLK - 1) / KT_TBLK * KT_TBLK;
  char* buf = (char*)calloc((size_t)(nr * rb), 1);
  char* src = (char*)malloc((size_t)(nr * rb));
  if (!buf || !src) {
    free(buf);
    free(src);
    return -1;
  }
  for (int64_t i = 0; i < nr * rb; i++) src[i] = (char)((i * 131 + (i >> 8) * 7 + 1) & 0xff);
  int bad = 0;
  for (int tiled = 0; tiled < 2 && !bad; tiled++) {
    memset(buf, 0, (size_t)(nr * rb));
    for (int r = 0; r < rows; r++) kt_put_row(buf, r, rb, src + (int64_t)r * rb, tiled);
    kt_act A = {buf, rb, NULL, tiled};
    kt_alayout L = kt_act_layout(&A, 1);
    for (int i0 = 0; i0 < rows && !bad; i0 += KT_TBLK)
      for (int kc = 0; kc < rb / 64 && !bad; kc++)
        for (int half = 0; half < 2; half++) {
          const char* tile = buf + (int64_t)(i0 / KT_TBLK) * L.blk32 + kc * L.step + (half ? L.a1 : 0);
          for (int rr = 0; rr < 16; rr++) {
            int r = i0 + half * 16 + rr;
            if (r < rows && memcmp(tile + rr * L.stride, src + (int64_t)r * rb + kc * 64, 64) != 0) bad = 1;
          }
        }
  }
  free(buf);
  free(src);
  return bad;
}
