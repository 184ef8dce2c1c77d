// engine_decode.c: the fused (decode) path: a task of few (token, expert)
// pairs on one pool without barriers, and the owned one-token tasks that
// find their blocks where a prefetch task read them.
#define _GNU_SOURCE
#include "kt_engine.h"

// With one pool and few (token, expert) pairs the phases above cost more in
// barriers than in work: at one token a layer reads ~12-50 MB in ~0.15-0.5 ms
// and each barrier across 15 threads costs microseconds of skew and wake-up.
// The fused path has no barrier inside the task. Items come from two atomic
// counters (gate/up, then down), both expert-major, and are ordered by
// per-expert and per-block counters instead of barriers:
//   - each token's row is converted once, by a conversion item (tokst);
//   - the first gate/up item of an expert gathers that expert's slot rows
//     (xst 0 -> 1 -> 2; the others of that expert wait for 2: a short copy);
//   - the last gate/up item of an expert to finish quantizes its h rows and
//     publishes hqst = 1;
//   - a down item is (expert, r4f hidden rows); it waits for hqst (rarely: the
//     experts finish gate/up in order, the last ones while the first ones'
//     down items run), and the last down item of a hidden block merges that
//     block for every token, in top-k order.
// A thread only waits for an item already claimed by a running thread, so
// nothing can deadlock. Every output element is produced by one item with
// the same kernels and summation order as the phased path: the two paths
// give bitwise equal results (TestFusedMatchesPhased).

// fused_gather makes expert x's slot rows ready: the first gate/up item of x
// copies its tokens' converted rows (waiting for each token's conversion
// item) into slot order; the others wait for it, a few microseconds at most.
static void fused_gather(kt_engine* e, int x, int64_t asz) {
  _Atomic int* st = &e->xst[x];
  int v = atomic_load_explicit(st, memory_order_acquire);
  if (v == 2) return;
  int zero = 0;
  if (v == 0 && atomic_compare_exchange_strong_explicit(st, &zero, 1, memory_order_acq_rel, memory_order_acquire)) {
    kt_pool* P = &e->pools[0];
    int H = e->l->hidden;
    int tiled = e->pf_tiled && e->cnt[x] >= e->pf_min;
    for (int s = e->off[x]; s < e->off[x] + e->cnt[x]; s++) {
      int t = e->slot_tok[s];
      for (int spins = 0; atomic_load_explicit(&e->tokst[t], memory_order_acquire) != e->seq;) spin_pause(&spins);
      kt_put_row((char*)P->X, s, H * asz, (const char*)P->Xt + (int64_t)t * H * asz, tiled);
      P->Xs[s] = P->Xts[t];
    }
    atomic_store_explicit(st, 2, memory_order_release);
    return;
  }
  for (int spins = 0; atomic_load_explicit(st, memory_order_acquire) != 2;) spin_pause(&spins);
}

// miss_ranges writes the MISS_RNG byte ranges [lo, hi) that gate/up item
// blk of expert xe reads (format fmt) to r; empty ones are [0, 0).
static void miss_ranges(int fmt, const kt_expert* xe, int blk, int64_t* r) {
  for (int g = 0; g < 2; g++) {
    kt_pfreg q[3];
    kt_pf_block(fmt, g ? &xe->up : &xe->gate, blk * KT_NB, &q[0], &q[1], &q[2]);
    for (int j = 0; j < 3; j++, r += 2) {
      int whole = q[j].rows == 1 && q[j].p;  // packed formats: one contiguous run
      r[0] = whole ? (int64_t)(intptr_t)q[j].p : 0;
      r[1] = whole ? r[0] + q[j].rb : 0;
    }
  }
}

// miss_stream sets worker w (of the pool, local index me) to prefetch the
// weights, scales and corrections of its items past mfirst[me] as its
// one-token kernels run (kt_side_pf; packed int formats, whose AVX-512
// kernels do it): it lists their byte ranges in its part of mrng.
static void miss_stream(kt_engine* e, kt_worker* w, int me) {
  const kt_layer* l = e->l;
  int nb = l->inter_p[0] / KT_NB, n = 0, i0 = e->ooff[me] + e->mfirst[me];
  w->s.sd = w->s.sd_end = NULL;
  w->s.sd_i = w->s.sd_n = 0;
  if (l->fmt != KT_FMT_I8_PK && l->fmt != KT_FMT_I4_PK && l->fmt != KT_FMT_I4G_PK) return;
  int64_t* r = e->mrng + (int64_t)i0 * 2 * MISS_RNG;
  for (int i = i0; i < e->ooff[me] + e->ocnt[me]; i++, n += MISS_RNG) {
    int item = e->oitems[i];
    miss_ranges(l->fmt, &l->ex[e->active[item / nb]], item % nb, r + 2 * n);
  }
  w->s.sd_rng = r;
  w->s.sd_n = n;
}

// kt_owned_setup lists each worker's gate/up items of the fused task in
// expert order (cfg.owned): item a*nb + blk goes to its block's owner.
// With cfg.miss_pf the experts the last owned prefetch of this layer read
// come first in every list; the others' items, from mfirst[w] on, are the
// worker's side stream (miss_stream).
void kt_owned_setup(kt_engine* e) {
  const kt_layer* l = e->l;
  int T = e->pools[0].nthreads, nb = l->inter_p[0] / KT_NB;
  int miss = e->cfg.miss_pf;
  for (int w = 0; w < T; w++) {
    e->ocnt[w] = 0;
    atomic_store_explicit(&e->ocur[w].v, 0, memory_order_relaxed);
  }
  for (int a = 0; a < e->nactive; a++)
    for (int blk = 0; blk < nb; blk++) e->ocnt[block_owner(e->active[a], blk, nb, T)]++;
  for (int w = 0, o = 0; w < T; w++) {
    e->ooff[w] = o;
    o += e->ocnt[w];
    e->ocnt[w] = 0;
    e->mfirst[w] = 0;
  }
  // pass 0: the prefetched experts (all of them without miss); pass 1: the others
  for (int pass = 0; pass < 1 + miss; pass++) {
    for (int a = 0; a < e->nactive; a++) {
      int x = e->active[a];
      if (miss && (e->pflayer == l && e->pfmark[x] == e->pfgen) != (pass == 0)) continue;
      for (int blk = 0; blk < nb; blk++) {
        int w = block_owner(x, blk, nb, T);
        e->oitems[e->ooff[w] + e->ocnt[w]++] = a * nb + blk;
      }
    }
    if (pass == 0)
      for (int w = 0; w < T; w++) e->mfirst[w] = e->ocnt[w];
  }
}

// fused_gate_up runs gate/up item `item` of the fused path; the last item
// of an expert quantizes its h rows for down and marks them ready.
static void fused_gate_up(kt_engine* e, kt_worker* w, kt_pool* P, int item, int nb, int64_t asz) {
  int H = e->l->hidden, I = e->l->inter_p[0], act = P->act;
  int x = e->active[item / nb], n0 = (item % nb) * KT_NB;
  int m = e->cnt[x], off = e->off[x];
  int pf = m >= e->pf_min;
  fused_gather(e, x, asz);
  int64_t t0 = e->trace ? now_ns() : 0;
  kt_gate_up_block(e, w, P, &e->l->ex[x], x, n0, H, I, asz, 0);
  if (e->trace) w->tr_guw += now_ns() - t0;
  if (atomic_fetch_add_explicit(&e->gud[x], 1, memory_order_acq_rel) + 1 == nb) {
    // last gate/up item of x: every h row of x is complete; quantize them for down
    // (bf16: gate/up stored h already)
    for (int s = off; s < off + m && act != KT_ACT_BF16; s++)
      kt_put_act_row(e, w, h_row(e, P, s, I), e->hbf16, I, act, (char*)P->Hq, s, &P->Hs[s], pf && e->pf_tiled);
    atomic_store_explicit(&e->hqst[x], 1, memory_order_release);
  }
}

void kt_run_job_fused(kt_worker* w) {
  kt_engine* e = w->e;
  kt_pool* P = &e->pools[0];
  const kt_layer* l = e->l;
  const kt_batch* b = &e->b;
  int H = l->hidden, I = l->inter_p[0];
  int act = P->act;
  int64_t asz = act_size(act);
  const kt_expert* ex = l->ex;
  int na = e->nactive;
  int item, nitems = 0;
  w->tr_guw = w->tr_dnw = 0;  // this task's block times (trace)

  // convert each token's row once (tokst[t] = seq publishes it); with few
  // tokens most threads skip straight to gate/up
  while ((item = atomic_fetch_add_explicit(&P->next[0].v, 1, memory_order_relaxed)) < e->ntok) {
    const char* src = (const char*)b->x + (int64_t)item * H * (b->x_bf16 ? 2 : 4);
    ROW_TO_ACT(src, b->x_bf16, H, act, (char*)P->Xt + (int64_t)item * H * asz, &P->Xts[item], w->s.row);
    atomic_store_explicit(&e->tokst[item], e->seq, memory_order_release);
  }

  // gate/up + silu; item i is (expert active[i / nb], rows (i % nb) * KT_NB).
  // Owned items (cfg.owned, one-token tasks): each worker first takes the items it owns
  // (kt_owned_setup's lists: the blocks a prefetch task read into its
  // caches), then the other workers' left; otherwise in counter order.
  int nb = I / KT_NB;
  int items = na * nb;
  if (e->owned) {
    // its own list first, then the others' in turn; with cfg.miss_pf its
    // kernels prefetch its items past mfirst (miss_stream)
    int T = P->nthreads, first = w->local;
    if (e->cfg.miss_pf) miss_stream(e, w, first);
    for (int v = 0; v < T; v++) {
      int o = (first + v) % T, j;
      while ((j = atomic_fetch_add_explicit(&e->ocur[o].v, 1, memory_order_relaxed)) < e->ocnt[o]) {
        fused_gate_up(e, w, P, e->oitems[e->ooff[o] + j], nb, asz);
        nitems++;
      }
    }
    w->s.sd = w->s.sd_end = NULL;  // no side stream for the down items
    w->s.sd_n = 0;
  } else {
    while ((item = atomic_fetch_add_explicit(&P->next[2].v, 1, memory_order_relaxed)) < items) {
      fused_gate_up(e, w, P, item, nb, asz);
      nitems++;
    }
  }
  if (e->trace) w->tr_gu = now_ns();

  // down; an item is (expert, hidden rows hb * r4). Ready first: a thread
  // takes the next item of the first expert whose h is complete, so a late
  // gate/up item (its thread preempted, say) holds back only its own
  // expert's down items while the others are done
  int r4 = e->r4f, nhb = H / r4;
  for (int lo = 0, spins = 0;;) {
    int xa = -1, hb = 0;
    for (int a = lo; a < na; a++) {
      _Atomic int* c = &e->dnx[(int64_t)a * DNX];
      if (atomic_load_explicit(c, memory_order_relaxed) >= nhb) {
        lo += a == lo;  // exhausted
        continue;
      }
      if (!atomic_load_explicit(&e->hqst[e->active[a]], memory_order_acquire)) continue;
      if ((hb = atomic_fetch_add_explicit(c, 1, memory_order_relaxed)) >= nhb) {
        lo += a == lo;
        continue;
      }
      xa = a;
      break;
    }
    if (xa < 0) {
      if (lo >= na) break;
      spin_pause(&spins);  // every expert left waits for its gate/up
      continue;
    }
    int x = e->active[xa], h0 = hb * r4;
    nitems++;
    int64_t t0 = e->trace ? now_ns() : 0;
    kt_down_block(e, w, P, &ex[x], x, h0, r4, H, I, asz);
    if (e->trace) w->tr_dnw += now_ns() - t0;
    if (atomic_fetch_add_explicit(&e->hbd[hb], 1, memory_order_acq_rel) + 1 != na) continue;
    // last expert of this hidden block: out[t][h0:h0+r4] for every token
    for (int t = 0; t < e->ntok; t++) kt_merge_token(e, w, t, h0, r4, H);
  }
  w->tr_items = nitems;
}
