// engine_pool.c: the worker pools: the threads (pinned, one pool per NUMA
// node), their sleeps and wake-ups, barriers, NUMA-bound memory, and the
// engine's creation and teardown.
#define _GNU_SOURCE
#include "kt_engine.h"

// ---------------------------------------------------------------- sync primitives

static void futex_wait(_Atomic int* addr, int val) {
  syscall(SYS_futex, (int*)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

// wake wakes the threads sleeping on addr, after its value changed. The
// syscall is made only when some thread sleeps (nsleep counts the threads in
// futex_wait on any of the engine's words): on the hot path every thread is
// spinning and a wake-up costs a load, not a syscall on the critical path.
// Both sides use sequentially consistent operations: either the waker sees
// the sleeper's increment, or the sleeper's futex_wait sees the new value.
void kt_wake(_Atomic int* nsleep, _Atomic int* addr) {
  if (atomic_load_explicit(nsleep, memory_order_seq_cst) > 0)
    syscall(SYS_futex, (int*)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

// kt_wait_change waits until *addr != old: spinning (spin_step), then sleeping.
void kt_wait_change(kt_engine* e, _Atomic int* addr, int old) {
  kt_spin sp = {0, 0, 0};
  while (atomic_load_explicit(addr, memory_order_acquire) == old)
    if (!spin_step(e, &sp)) break;
  if (e->trace && atomic_load_explicit(addr, memory_order_seq_cst) == old)
    atomic_fetch_add_explicit(&e->tr[KT_TR_SLEEPS], 1, memory_order_relaxed);
  while (atomic_load_explicit(addr, memory_order_seq_cst) == old) {
    atomic_fetch_add_explicit(&e->nsleep, 1, memory_order_seq_cst);
    futex_wait(addr, old);
    atomic_fetch_sub_explicit(&e->nsleep, 1, memory_order_seq_cst);
  }
}

void kt_barrier(kt_engine* e, _Atomic int* cnt, _Atomic int* gen, int n) {
  _Atomic int* nsleep = &e->nsleep;
  if (n <= 1) return;
  int g = atomic_load_explicit(gen, memory_order_acquire);
  if (atomic_fetch_add_explicit(cnt, 1, memory_order_acq_rel) == n - 1) {
    atomic_store_explicit(cnt, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(gen, 1, memory_order_seq_cst);
    kt_wake(nsleep, gen);
  } else {
    kt_wait_change(e, gen, g);
  }
}

// ---------------------------------------------------------------- memory

#define MPOL_PREFERRED 1

void* kt_alloc(int64_t bytes, int node) {
  if (bytes <= 0) bytes = 64;
  void* p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (bytes >= (2 << 20)) madvise(p, (size_t)bytes, MADV_HUGEPAGE);
  if (node >= 0 && node < 64) {
    unsigned long mask = 1UL << node;
    syscall(SYS_mbind, p, (unsigned long)bytes, MPOL_PREFERRED, &mask, 64UL, 0U);  // best effort
  }
  return p;
}

void kt_free(void* p, int64_t bytes) {
  if (p) munmap(p, (size_t)(bytes <= 0 ? 64 : bytes));
}

// ---------------------------------------------------------------- threads

// kt_worker_init pins the calling thread and loads the AMX tile configuration.
void kt_worker_init(kt_worker* w) {
  kt_engine* e = w->e;
  if (w->cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  _mm_setcsr(0x1f80);  // default MXCSR: no flush-to-zero (the fp8 decode relies on denormals)
  // (emulated tiles, KT_ISA_AMX_EMU: no tile state to configure)
  if ((e->isa & KT_ISA_AMX) && !(e->isa & KT_ISA_AMX_EMU) && kt_amx_init_thread() != 0)
    atomic_store(&e->amx_failed, 1);
  atomic_fetch_add(&e->ready, 1);
}

// Workers 1..n-1 run here; worker 0 is the queue thread itself.
static void* worker_main(void* arg) {
  kt_worker* w = (kt_worker*)arg;
  kt_engine* e = w->e;
  kt_worker_init(w);
  int seen = 0;
  for (;;) {
    kt_wait_change(e, &e->job_gen, seen);
    seen = atomic_load_explicit(&e->job_gen, memory_order_acquire);
    if (atomic_load(&e->quit)) break;
    if (e->trace) w->tr_seen = now_ns();
    kt_run_job(w);
    if (e->trace) w->tr_end = now_ns();
    if (atomic_fetch_add_explicit(&e->job_done, 1, memory_order_acq_rel) + 1 == e->nthreads) {
      atomic_fetch_add_explicit(&e->done_gen, 1, memory_order_seq_cst);
      kt_wake(&e->nsleep, &e->done_gen);
    }
  }
  return NULL;
}

// ---------------------------------------------------------------- engine

static void free_engine(kt_engine* e) {
  if (e->workers) {
    for (int i = 0; i < e->nthreads; i++) {
      kt_worker* w = &e->workers[i];
      kt_free(w->s.pack, e->packbytes);
      kt_free(w->s.pack2, e->packbytes);
      free(w->s.ci);
      free(w->s.row);
      free(w->s.gsum);
      free(w->cg);
      free(w->cu);
      free(w->cd);
      free(w->park);
      free(w->trow);
      kt_free(w->xa, e->xabytes);
      free(w->xas);
      free(w->parts);
      free(w->pw);
    }
    free(e->workers);
  }
  for (int p = 0; p < e->npools; p++) {
    kt_pool* P = &e->pools[p];
    kt_free(P->X, P->bytesX);
    kt_free(P->Hf, P->bytesH);
    kt_free(P->Hq, P->bytesHq);
    kt_free(P->Y, P->bytesOut);
    kt_free(P->Xt, P->bytesXt);
    kt_free(P->Xt2, P->bytesXt);
    free(P->Xts);
    free(P->Xs);
    free(P->pfreg);
    free(P->Hs);
    free((void*)P->gud);
  }
  free(e->cnt);
  free(e->off);
  free(e->active);
  free(e->slot_tok);
  free(e->slot_w);
  free(e->tok_slot);
  free((void*)e->xst);
  free((void*)e->gud);
  free((void*)e->hqst);
  free((void*)e->hbd);
  free((void*)e->tokst);
  free(e->oitems);
  free(e->pfmark);
  free(e->mfirst);
  free(e->mrng);
  free(e->ooff);
  free(e->ocnt);
  free(e->ocur);
  free(e->blk_tiled);
  free((void*)e->tr_wend);
  free((void*)e->tr_wseen);
  free((void*)e->dnx);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv_task);
  pthread_cond_destroy(&e->cv_done);
  free(e);
}

int kt_engine_isa(const kt_engine* e) { return e->isa; }

int kt_engine_threads(const kt_engine* e) { return e->nthreads; }

void kt_engine_trace(kt_engine* e, int64_t* sums, int64_t* wend, int64_t* wseen) {
  pthread_mutex_lock(&e->mu);  // the caller synced: pending (acquire) made the sums visible
  for (int i = 0; i < KT_TR_N; i++) sums[i] = atomic_exchange_explicit(&e->tr[i], 0, memory_order_relaxed);
  for (int i = 0; i < e->nthreads; i++) {
    int64_t v = atomic_exchange_explicit(&e->tr_wend[i], 0, memory_order_relaxed);
    if (wend) wend[i] = v;
    v = atomic_exchange_explicit(&e->tr_wseen[i], 0, memory_order_relaxed);
    if (wseen) wseen[i] = v;
  }
  pthread_mutex_unlock(&e->mu);
}

void kt_engine_phases(kt_engine* e, int64_t* ns, int64_t* tasks) {
  pthread_mutex_lock(&e->mu);  // the caller synced: pending (acquire) made the sums visible
  for (int i = 0; i < KT_NPHASES; i++) {
    ns[i] = e->ph_ns[i];
    e->ph_ns[i] = 0;
  }
  tasks[0] = e->ph_tasks[0];
  tasks[1] = e->ph_tasks[1];
  e->ph_tasks[0] = e->ph_tasks[1] = 0;
  pthread_mutex_unlock(&e->mu);
}

void kt_engine_free(kt_engine* e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  atomic_store(&e->quit, 1);
  pthread_cond_broadcast(&e->cv_task);
  pthread_mutex_unlock(&e->mu);
  if (e->qstarted) pthread_join(e->qthread, NULL);
  atomic_fetch_add(&e->job_gen, 1);
  syscall(SYS_futex, (int*)&e->job_gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
  for (int i = 0; e->workers && i < e->nthreads; i++)
    if (e->workers[i].started) pthread_join(e->workers[i].th, NULL);
  free_engine(e);
}

static void* xalloc(size_t n) {
  void* p = NULL;
  if (posix_memalign(&p, LINE, n ? n : 64) != 0) return NULL;
  memset(p, 0, n ? n : 64);
  return p;
}

kt_engine* kt_engine_new(const kt_engine_config* cfg, char* err, int errlen) {
#define FAIL(...)                            \
  do {                                       \
    snprintf(err, (size_t)errlen, __VA_ARGS__); \
    kt_engine_free(e);                       \
    return NULL;                             \
  } while (0)
  kt_engine* e = NULL;
  if (posix_memalign((void**)&e, LINE, sizeof *e) != 0) e = NULL;
  if (e) memset(e, 0, sizeof *e);
  if (!e) {
    snprintf(err, (size_t)errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv_task, NULL);
  pthread_cond_init(&e->cv_done, NULL);
  e->cfg = *cfg;
  e->cfg.cpus = NULL;
  e->isa = cfg->isa;
  if (cfg->npools < 1 || cfg->npools > 8) FAIL("pool count %d outside 1..8", cfg->npools);
  e->npools = cfg->npools;
  for (int p = 0; p < e->npools; p++) {
    if (cfg->threads[p] < 1) FAIL("pool %d has %d threads", p, cfg->threads[p]);
    e->pools[p].tbase = e->nthreads;
    e->pools[p].nthreads = cfg->threads[p];
    e->pools[p].node = cfg->node[p];
    e->nthreads += cfg->threads[p];
  }
  int H = cfg->hidden, I = cfg->inter_p;
  e->max_slots = (int64_t)cfg->max_tokens * cfg->max_k + (int64_t)KT_TBLK * cfg->nexp + 32;
  e->cnt = (int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->off = (int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->active = (int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->slot_tok = (int*)xalloc(sizeof(int) * (size_t)e->max_slots);
  e->slot_w = (float*)xalloc(sizeof(float) * (size_t)e->max_slots);
  e->tok_slot = (int*)xalloc(sizeof(int) * (size_t)cfg->max_tokens * (size_t)cfg->max_k);
  e->xst = (_Atomic int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->gud = (_Atomic int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->hqst = (_Atomic int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->hbd = (_Atomic int*)xalloc(sizeof(int) * (size_t)(cfg->hidden / KT_NB + 1));
  e->tokst = (_Atomic int*)xalloc(sizeof(int) * (size_t)cfg->max_tokens);
  e->oitems = (int*)xalloc(sizeof(int) * (size_t)cfg->nexp * (size_t)(cfg->inter_p / KT_NB + 1));
  e->ooff = (int*)xalloc(sizeof(int) * (size_t)(e->nthreads + 1));
  e->ocnt = (int*)xalloc(sizeof(int) * (size_t)(e->nthreads + 1));
  e->ocur = (kt_cursor*)xalloc(sizeof(kt_cursor) * (size_t)(e->nthreads + 1));
  e->pfmark = (uint32_t*)xalloc(sizeof(uint32_t) * (size_t)cfg->nexp);
  e->mfirst = (int*)xalloc(sizeof(int) * (size_t)(e->nthreads + 1));
  e->mrng = cfg->miss_pf ? (int64_t*)xalloc(sizeof(int64_t) * 2 * MISS_RNG * (size_t)cfg->nexp * (size_t)(cfg->inter_p / KT_NB + 1)) : NULL;
  e->blk_tiled = (uint8_t*)xalloc((size_t)(e->max_slots / 16 + 1));
  e->fused_max = cfg->fused_max_slots == 0 ? FUSED_MAX_SLOTS : cfg->fused_max_slots;
  cpu_set_t allowed;
  int ncpu = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 0;
  if (ncpu <= 0) ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
  e->spin_ns = cfg->spin_ns > 0 ? cfg->spin_ns : cfg->spin_ns < 0 ? 0 : SPIN_NS;
  // oversubscribed (a worker per CPU: the caller shares one): yield from the start
  e->spin_pure_ns = e->nthreads >= ncpu ? 0 : e->spin_ns < SPIN_PURE_NS ? e->spin_ns : SPIN_PURE_NS;
  e->dnx = (_Atomic int*)xalloc(sizeof(int) * DNX * (size_t)cfg->nexp);
  if (!e->dnx) FAIL("out of memory");
  e->trace = cfg->trace != 0;
  e->tr_wend = (_Atomic int64_t*)xalloc(sizeof(int64_t) * (size_t)(e->nthreads + 1));
  e->tr_wseen = (_Atomic int64_t*)xalloc(sizeof(int64_t) * (size_t)(e->nthreads + 1));
  if (!e->tr_wend || !e->tr_wseen) FAIL("out of memory");
  e->mch = cfg->mch <= 0 ? 0 : cfg->mch > KT_MCH ? KT_MCH : (cfg->mch + 31) / 32 * 32;
  if (!e->cnt || !e->off || !e->active || !e->slot_tok || !e->slot_w || !e->tok_slot || !e->xst || !e->gud || !e->hqst || !e->hbd || !e->tokst || !e->oitems || !e->ooff || !e->ocnt || !e->ocur || !e->pfmark || !e->mfirst || (cfg->miss_pf && !e->mrng) || !e->blk_tiled)
    FAIL("out of memory for routing tables");
  int64_t asz = (cfg->isa & (KT_ISA_AMX | KT_ISA_AVX512BF16)) ? 2 : 4;
  for (int p = 0; p < e->npools; p++) {
    kt_pool* P = &e->pools[p];
    P->asz = asz;
    P->max_slots = e->max_slots;
    P->bytesX = e->max_slots * H * asz;
    P->bytesH = e->max_slots * I * 4;
    P->bytesHq = e->max_slots * I * asz;
    P->bytesOut = e->max_slots * H * 4 + 64;
    P->bytesXt = (int64_t)cfg->max_tokens * H * asz + 64;
    P->Xt = kt_alloc(P->bytesXt, P->node);
    P->Xt2 = kt_alloc(P->bytesXt, P->node);
    P->Xts = (float*)xalloc(sizeof(float) * (size_t)cfg->max_tokens + 64);
    P->X = kt_alloc(P->bytesX, P->node);
    P->Hf = (float*)kt_alloc(P->bytesH, P->node);
    P->Hq = kt_alloc(P->bytesHq, P->node);
    P->Y = (float*)kt_alloc(P->bytesOut, P->node);
    P->Xs = (float*)xalloc(sizeof(float) * (size_t)e->max_slots);
    P->Hs = (float*)xalloc(sizeof(float) * (size_t)e->max_slots);
    P->gud = (_Atomic int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
    P->pfreg = (kt_pfreg*)xalloc(sizeof(kt_pfreg) * PF_REGS);
    if (!P->X || !P->Hf || !P->Hq || !P->Y || !P->Xs || !P->Hs || !P->Xt || !P->Xt2 || !P->Xts || !P->gud || !P->pfreg)
      FAIL("out of memory for the scratch buffers of pool %d (%lld MiB)", p,
           (long long)((P->bytesX + P->bytesH + P->bytesHq + P->bytesOut) >> 20));
  }
  e->workers = (kt_worker*)xalloc(sizeof(kt_worker) * (size_t)e->nthreads);
  if (!e->workers) FAIL("out of memory");
  // xa holds up to KT_XA_ROWS bf16 rows (twice as many int8 rows) of one
  // expert (gather_rows)
  e->xabytes = (int64_t)H * 2 * KT_XA_ROWS;
  int maxk = H > I ? H : I;
  for (int p = 0, g = 0; p < e->npools; p++)
    for (int i = 0; i < cfg->threads[p]; i++) {
      kt_worker* w = &e->workers[g++];
      w->e = e;
      w->pool = p;
      w->local = i;
      w->global = g - 1;
      w->cpu = (cfg->cpus && w->global < cfg->ncpus) ? cfg->cpus[w->global] : -1;
      e->packbytes = (int64_t)KT_NB * maxk * 2;
      w->s.pack = kt_alloc(e->packbytes, e->pools[p].node);
      w->s.pack2 = kt_alloc(e->packbytes, e->pools[p].node);
      w->s.ci = (int32_t*)xalloc(sizeof(int32_t) * KT_MCH * KT_NB);
      w->s.row = (float*)xalloc(sizeof(float) * (size_t)maxk + 64);
      w->s.gsum = (int32_t*)xalloc(sizeof(int32_t) * KT_GSUM_TOK * (size_t)(maxk / 32 + 1));
      w->cg = (float*)xalloc(sizeof(float) * KT_MCH * KT_NB);
      w->cu = (float*)xalloc(sizeof(float) * KT_MCH * KT_NB);
      w->cd = (float*)xalloc(sizeof(float) * KT_MCH * KT_NB);
      w->park = (char*)xalloc(KT_PARK);
      w->trow = xalloc(sizeof(float) * (size_t)maxk + 64);
      w->xa = kt_alloc(e->xabytes, e->pools[p].node);
      w->xas = (float*)xalloc(sizeof(float) * 2 * KT_XA_ROWS);  // a scale per int8 row xa can hold
      w->s.amx_pf = cfg->amx_pf;
      w->s.amx_pfm = cfg->amx_pfm > 0 ? cfg->amx_pfm : 3;
      w->s.amx_t1 = cfg->amx_t1;
      w->s.i4_kch = cfg->amx_i4_kch;
      w->s.i4_pf = cfg->amx_i4_pf;
      w->s.i4g_pf = cfg->amx_i4g_pf;
      w->s.i4f_pf = cfg->amx_i4f_pf;
      w->s.i4_fuse = cfg->amx_i4_fuse;
      w->s.i4_fuse1 = cfg->amx_i4_fuse1;
      w->s.dec_pf = cfg->dec_pf;
      w->parts = (const void**)xalloc(sizeof(void*) * (size_t)(cfg->max_k * e->npools));
      w->pw = (float*)xalloc(sizeof(float) * (size_t)(cfg->max_k * e->npools));
      if (!w->s.pack || !w->s.pack2 || !w->s.ci || !w->s.row || !w->s.gsum || !w->cg || !w->cu || !w->cd || !w->park || !w->trow || !w->xa || !w->xas || !w->parts || !w->pw)
        FAIL("out of memory for thread scratch");
    }
  if (cfg->cpus)
    for (int g = 0; g < e->nthreads && g < cfg->ncpus; g++) e->workers[g].cpu = cfg->cpus[g];
  for (int g = 1; g < e->nthreads; g++) {
    if (pthread_create(&e->workers[g].th, NULL, worker_main, &e->workers[g]) != 0)
      FAIL("cannot start worker thread %d: %s", g, strerror(errno));
    e->workers[g].started = 1;
  }
  if (pthread_create(&e->qthread, NULL, kt_queue_main, e) != 0) FAIL("cannot start the queue thread");
  e->qstarted = 1;
  while (atomic_load(&e->ready) < e->nthreads) usleep(100);
  if (atomic_load(&e->amx_failed)) e->isa &= ~KT_ISA_AMX;  // fall back to AVX-512 rather than fault
  return e;
#undef FAIL
}
