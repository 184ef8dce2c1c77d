// engine_prefetch.c: prefetch tasks (kt_prefetch): the idle workers read
// the weights of the experts a later task is predicted to take into their
// caches, until a task is queued behind.
#define _GNU_SOURCE
#include "kt_engine.h"

// pf_add appends to pool p's regions the rows x rb bytes at base, stride
// bytes apart (nothing when base is NULL or the region empty).
static void pf_add(kt_pool* P, const void* base, int64_t rows, int64_t rb, int64_t stride) {
  if (!base || rows <= 0 || rb <= 0 || P->npfreg >= PF_REGS) return;
  kt_pfreg* r = &P->pfreg[P->npfreg++];
  r->p = (const char*)base;
  r->rows = rows;
  r->rb = rb;
  r->stride = stride;
  r->c0 = P->npfch;
  P->npfch += (rows * rb + PF_CHUNK - 1) / PF_CHUNK;
}

// pf_mat appends the bytes a forward task reads of W (the layer's format).
static void pf_mat(kt_pool* P, int fmt, const kt_mat* W) {
  int64_t n = W->n, k = W->k;
  switch (fmt) {
    case KT_FMT_BF16_RM:
      pf_add(P, W->w, n, k * 2, W->ld * 2);
      return;
    case KT_FMT_FP8_RM:
      pf_add(P, W->w, n, k, W->ld);
      return;
    case KT_FMT_BF16_PK:
      pf_add(P, W->w, 1, n * k * 2, 0);
      return;
    case KT_FMT_I8_PK:
      pf_add(P, W->w, 1, n * k, 0);
      break;
    case KT_FMT_I4_PK:
    case KT_FMT_I4G_PK:
      pf_add(P, W->w, 1, n * k / 2, 0);
      break;
    default:
      return;
  }
  if (fmt == KT_FMT_I4G_PK && W->group > 0) {
    pf_add(P, W->gscale, 1, n * (k / W->group) * 2, 0);  // bf16 group scales
    return;
  }
  pf_add(P, W->scale, 1, n * 4, 0);
  pf_add(P, W->corr, 1, n * 4, 0);
}

// pf_read reads the lines of bytes [lo, hi) of region r, one load a line
// (sequential loads, which the L2 streamer runs ahead of, as the read probe;
// returns a value that depends on every load, so none is dropped). Against
// it, prefetcht1 hints and loads followed by cldemote measured no faster.
static uint32_t pf_read(const kt_pfreg* r, int64_t lo, int64_t hi) {
  int64_t row = lo / r->rb, o = lo % r->rb;
  uint32_t acc = 0;
  while (lo < hi) {
    int64_t seg = r->rb - o < hi - lo ? r->rb - o : hi - lo;
    const char* a = r->p + row * r->stride + o;
    for (uintptr_t q = (uintptr_t)a & ~(uintptr_t)63; q < (uintptr_t)(a + seg); q += 64) acc += *(const uint8_t*)q;
    lo += seg;
    row++;
    o = 0;
  }
  return acc;
}

// kt_pf_block sets r to the bytes of rows [n0, n0+KT_NB) of W (format fmt)
// and s, c to their scales and corrections (rows 0 when there are none);
// returns the bytes of all three.
int64_t kt_pf_block(int fmt, const kt_mat* W, int n0, kt_pfreg* r, kt_pfreg* s, kt_pfreg* c) {
  int64_t k = W->k, per16 = panel_bytes(fmt, k), sper16 = 16 * 4;  // scales: 16 rows of one per row
  memset(r, 0, sizeof *r);
  memset(s, 0, sizeof *s);
  memset(c, 0, sizeof *c);
  if (fmt == KT_FMT_BF16_RM || fmt == KT_FMT_FP8_RM) {
    int64_t esz = fmt == KT_FMT_BF16_RM ? 2 : 1;
    *r = (kt_pfreg){(const char*)W->w + (int64_t)n0 * W->ld * esz, KT_NB, k * esz, W->ld * esz, 0};
    return KT_NB * k * esz;
  }
  if (!per16) return 0;
  if (fmt == KT_FMT_BF16_PK) sper16 = 0;
  const void* sc = W->scale;
  if (fmt == KT_FMT_I4G_PK) {  // bf16 per row and group
    sper16 = W->group > 0 ? k / W->group * 16 * 2 : 0;
    sc = W->gscale;
  }
  *r = (kt_pfreg){(const char*)W->w + (int64_t)(n0 / 16) * per16, 1, 2 * per16, 0, 0};
  if (sc && sper16) *s = (kt_pfreg){(const char*)sc + (int64_t)(n0 / 16) * sper16, 1, 2 * sper16, 0, 0};
  if (W->corr && sper16) *c = (kt_pfreg){(const char*)W->corr + (int64_t)(n0 / 16) * sper16, 1, 2 * sper16, 0, 0};
  return 2 * per16 + (sc ? 2 * sper16 : 0) + (W->corr ? 2 * sper16 : 0);
}

// run_prefetch_owned is a worker's part of a prefetch task on the owned
// path (cfg.owned): the gate and up row blocks of the listed experts that
// it owns (owned_block), expert by expert, until a task is queued behind
// (checked every PF_STEP bytes).
static void run_prefetch_owned(kt_worker* w) {
  kt_engine* e = w->e;
  const kt_layer* l = e->l;
  int T = e->pools[0].nthreads, me = w->local, nb = l->inter_p[0] / KT_NB;
  int64_t planned = 0, got = 0;
  uint32_t acc = 0;
  int stop = 0;
  const kt_task* t = e->pft;
  for (int i = 0; i < t->npf; i++) {
    const kt_expert* x = &l->ex[t->pf[i]];
    for (int blk = owned_block(t->pf[i], nb, T, me); blk < nb; blk += T) {
      for (int g = 0; g < 2; g++) {
        kt_pfreg r[3];
        int64_t b = kt_pf_block(l->fmt, g ? &x->up : &x->gate, blk * KT_NB, &r[0], &r[1], &r[2]);
        planned += b;
        for (int j = 0; j < 3 && !stop; j++)
          for (int64_t lo = 0, n = r[j].rows * r[j].rb; lo < n; lo += PF_STEP) {
            if ((stop = atomic_load_explicit(&e->qtail, memory_order_relaxed) != e->pf_tail)) break;
            int64_t hi = lo + PF_STEP < n ? lo + PF_STEP : n;
            acc += pf_read(&r[j], lo, hi);
            got += hi - lo;
          }
      }
    }
  }
  w->pf_sink = acc;
  atomic_fetch_add_explicit(&e->pf_planned, planned, memory_order_relaxed);
  if (got) atomic_fetch_add_explicit(&e->pf_read, got, memory_order_relaxed);
}

// kt_run_prefetch_job is a worker's part of a prefetch task: chunks of its
// pool's regions in order, until they run out or a task is queued behind.
void kt_run_prefetch_job(kt_worker* w) {
  kt_engine* e = w->e;
  if (e->pf_own) {
    run_prefetch_owned(w);
    return;
  }
  kt_pool* P = &e->pools[w->pool];
  const kt_pfreg* R = P->pfreg;
  int ri = 0, c;
  int64_t got = 0;
  uint32_t acc = 0;
  while ((c = atomic_fetch_add_explicit(&P->pfnext, 1, memory_order_relaxed)) < P->npfch) {
    if (atomic_load_explicit(&e->qtail, memory_order_relaxed) != e->pf_tail) break;
    while (ri + 1 < P->npfreg && R[ri + 1].c0 <= c) ri++;
    int64_t lo = (int64_t)(c - R[ri].c0) * PF_CHUNK, end = R[ri].rows * R[ri].rb;
    int64_t hi = lo + PF_CHUNK < end ? lo + PF_CHUNK : end;
    acc += pf_read(&R[ri], lo, hi);
    got += hi - lo;
  }
  w->pf_sink = acc;
  if (got) atomic_fetch_add_explicit(&e->pf_read, got, memory_order_relaxed);
}

// kt_run_prefetch runs a prefetch task (kt_prefetch) on every worker, the
// queue thread as worker 0: each pool reads its slices of the listed
// experts. head is the task's queue position: a task queued behind it
// (qtail past head + 1) stops the reading.
void kt_run_prefetch(kt_engine* e, const kt_task* t, int head) {
  const kt_layer* l = t->l;
  // the owned path reads each gate/up block on the core that will take it
  // (one pool: only one-pool tasks run the fused path); otherwise each pool
  // reads its slices of the experts in chunks
  e->pf_own = e->cfg.owned && e->npools == 1;
  if (e->pf_own && e->cfg.miss_pf) {  // what a task of this layer finds in the caches (kt_owned_setup)
    if (++e->pfgen == 0) e->pfgen = 1;  // marks start zeroed
    e->pflayer = l;
    for (int i = 0; i < t->npf; i++) e->pfmark[t->pf[i]] = e->pfgen;
  }
  int64_t planned = 0;
  for (int p = 0; p < e->npools && !e->pf_own; p++) {
    kt_pool* P = &e->pools[p];
    P->npfreg = 0;
    P->npfch = 0;
    atomic_store_explicit(&P->pfnext, 0, memory_order_relaxed);
    for (int i = 0; i < t->npf; i++) {
      const kt_expert* x = &l->ex[(int64_t)p * l->nexp + t->pf[i]];
      pf_mat(P, l->fmt, &x->gate);
      pf_mat(P, l->fmt, &x->up);
      pf_mat(P, l->fmt, &x->down);
    }
    for (int i = 0; i < P->npfreg; i++) planned += P->pfreg[i].rows * P->pfreg[i].rb;
  }
  atomic_fetch_add_explicit(&e->pf_planned, planned, memory_order_relaxed);
  e->l = l;
  e->pft = t;
  e->pfjob = 1;
  e->pf_tail = head + 1;
  e->fused = 0;
  atomic_store_explicit(&e->job_done, 0, memory_order_relaxed);
  int dg = atomic_load_explicit(&e->done_gen, memory_order_acquire);
  publish_job(e);
  kt_run_job(&e->workers[0]);
  kt_wait_workers(e, dg);
  e->pfjob = 0;
}

int kt_prefetch(kt_engine* e, const kt_layer* l, const int32_t* ids, int n) {
  kt_task t;
  memset(&t, 0, sizeof t);
  t.l = l;
  for (int i = 0; i < n && t.npf < KT_PF_MAX; i++) {
    int32_t x = ids[i];
    if (x < 0 || x >= l->nexp || (l->skip && l->skip[x])) continue;
    int seen = 0;
    for (int j = 0; j < t.npf && !seen; j++) seen = t.pf[j] == x;
    if (!seen) t.pf[t.npf++] = x;
  }
  if (t.npf == 0) return 0;
  return kt_enqueue(e, &t);
}

void kt_engine_prefetched(kt_engine* e, int64_t* planned, int64_t* read) {
  *planned = atomic_load_explicit(&e->pf_planned, memory_order_relaxed);
  *read = atomic_load_explicit(&e->pf_read, memory_order_relaxed);
}
