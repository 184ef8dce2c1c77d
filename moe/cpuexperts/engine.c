// engine.c: worker pools, task queue, routing and the phases of one MoE layer.
//
// A task runs as five phases. Phases 1-4 run inside each pool on that pool's
// slice of every expert's intermediate dimension (NUMA tensor parallelism);
// phase 5 sums the pools' partial outputs. Within a phase, threads take work
// items from an atomic counter (work stealing). Every output element is
// produced by exactly one item with a fixed summation order (experts
// ascending, then pools ascending), so results do not depend on the thread
// count or on which thread ran what.
//
//   1. pack: each routed (token, expert) slot's activation row, converted to the
//      kernel's activation format, grouped by expert (padded to 16 rows)
//   2. gate/up: per (expert, 32 intermediate rows): h = silu(gate x) * up x
//   3. quantize h rows for the down projection
//   4. down: per 32 hidden rows, over all experts: out_p[t] += w * (down h)
//   5. merge: out[t] = (incremental ? out[t] : 0) + sum over pools out_p[t]
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xmmintrin.h>

#include "kt_internal.h"

#define QCAP 64
#define SPIN 20000
#define AMX_MIN_M 8
#define RMPF_MIN_M 16

typedef struct {
  int nthreads, node, tbase;
  int act;         // activation format of the current task
  int64_t asz;     // max bytes per activation element
  int64_t max_slots;
  void* X;
  float* Xs;
  float* Hf;
  void* Hq;
  float* Hs;
  float* out;
  int64_t bytesX, bytesH, bytesHq, bytesOut;
  _Atomic int next[4];
  _Atomic int bar_cnt;
  _Atomic int bar_gen;
} kt_pool;

typedef struct {
  struct kt_engine* e;
  int pool, local, global, cpu;
  kt_scratch s;
  float *cg, *cu, *cd;
  pthread_t th;
  int started;
} kt_worker;

typedef struct {
  const kt_layer* l;
  kt_batch b;
} kt_task;

struct kt_engine {
  kt_engine_config cfg;
  int npools, nthreads, isa;
  kt_pool pools[8];
  kt_worker* workers;

  _Atomic int job_gen;
  _Atomic int job_done;
  _Atomic int done_gen;
  _Atomic int quit;
  _Atomic int gbar_cnt;
  _Atomic int gbar_gen;
  _Atomic int gnext;

  // current task, written by the queue thread before a job starts
  const kt_layer* l;
  kt_batch b;
  int ntok;
  kt_kernel kdec, kpf;
  int pf_min;

  // routing
  int64_t max_slots;
  int* cnt;
  int* off;
  int* active;
  int nactive, nslots;
  int* slot_tok;
  float* slot_w;

  // queue
  pthread_mutex_t mu;
  pthread_cond_t cv_task, cv_done;
  kt_task q[QCAP];
  int qhead, qtail, pending;
  pthread_t qthread;
  int qstarted;

  int err;
  char errmsg[256];
};

// ---------------------------------------------------------------- sync primitives

static void futex_wait(_Atomic int* addr, int val) {
  syscall(SYS_futex, (int*)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake(_Atomic int* addr) { syscall(SYS_futex, (int*)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0); }

static void wait_change(_Atomic int* addr, int old) {
  for (int i = 0; i < SPIN; i++) {
    if (atomic_load_explicit(addr, memory_order_acquire) != old) return;
    _mm_pause();
  }
  while (atomic_load_explicit(addr, memory_order_acquire) == old) futex_wait(addr, old);
}

static void barrier(_Atomic int* cnt, _Atomic int* gen, int n) {
  if (n <= 1) return;
  int g = atomic_load_explicit(gen, memory_order_acquire);
  if (atomic_fetch_add_explicit(cnt, 1, memory_order_acq_rel) == n - 1) {
    atomic_store_explicit(cnt, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(gen, 1, memory_order_release);
    futex_wake(gen);
  } else {
    wait_change(gen, g);
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

// ---------------------------------------------------------------- routing

static int task_error(kt_engine* e, const char* msg) {
  if (!e->err) {
    e->err = 1;
    snprintf(e->errmsg, sizeof e->errmsg, "%s", msg);
  }
  return -1;
}

// route buckets (token, k) pairs by expert. Returns -1 on an invalid batch.
static int route(kt_engine* e) {
  const kt_layer* l = e->l;
  const kt_batch* b = &e->b;
  int ntok = b->ntok_ptr ? *b->ntok_ptr : b->ntok;
  char msg[200];
  if (ntok < 0 || ntok > e->cfg.max_tokens) {
    snprintf(msg, sizeof msg, "batch of %d tokens, engine sized for at most %d", ntok, e->cfg.max_tokens);
    return task_error(e, msg);
  }
  if (b->k < 0 || b->k > e->cfg.max_k) {
    snprintf(msg, sizeof msg, "top-k %d, engine sized for at most %d", b->k, e->cfg.max_k);
    return task_error(e, msg);
  }
  e->ntok = ntok;
  int E = l->nexp;
  memset(e->cnt, 0, sizeof(int) * E);
  for (int t = 0; t < ntok; t++)
    for (int j = 0; j < b->k; j++) {
      int id = b->ids[(int64_t)t * b->k + j];
      if (id < 0 || id >= E) continue;
      if (l->skip && l->skip[id]) continue;
      e->cnt[id]++;
    }
  int na = 0, off = 0;
  for (int x = 0; x < E; x++) {
    e->off[x] = off;
    if (e->cnt[x]) {
      e->active[na++] = x;
      int pad = (e->cnt[x] + 15) & ~15;
      for (int s = off + e->cnt[x]; s < off + pad; s++) e->slot_tok[s] = -1;
      off += pad;
    }
  }
  e->nactive = na;
  e->nslots = off;
  // fill slots in token order within each expert: reuse cnt as a cursor
  memset(e->cnt, 0, sizeof(int) * E);
  for (int t = 0; t < ntok; t++)
    for (int j = 0; j < b->k; j++) {
      int id = b->ids[(int64_t)t * b->k + j];
      if (id < 0 || id >= E) continue;
      if (l->skip && l->skip[id]) continue;
      int s = e->off[id] + e->cnt[id]++;
      e->slot_tok[s] = t;
      e->slot_w[s] = b->wts[(int64_t)t * b->k + j];
    }
  return 0;
}

// ---------------------------------------------------------------- phases

static int64_t act_size(int act) { return act == KT_ACT_F32 ? 4 : act == KT_ACT_BF16 ? 2 : 1; }

static void run_job(kt_worker* w) {
  kt_engine* e = w->e;
  kt_pool* P = &e->pools[w->pool];
  const kt_layer* l = e->l;
  const kt_batch* b = &e->b;
  int H = l->hidden, I = l->inter_p[w->pool];
  int act = P->act;
  int64_t asz = act_size(act);
  const kt_expert* ex = l->ex + (int64_t)w->pool * l->nexp;
  int nth = P->nthreads;
  int item;

  // 1. pack activations per slot
  int nchunks = (e->nslots + 15) / 16;
  while ((item = atomic_fetch_add_explicit(&P->next[0], 1, memory_order_relaxed)) < nchunks) {
    for (int s = item * 16; s < item * 16 + 16 && s < e->nslots; s++) {
      int t = e->slot_tok[s];
      if (t < 0) continue;
      const char* src = (const char*)b->x + (int64_t)t * H * (b->x_bf16 ? 2 : 4);
      kt_row_to_act(src, b->x_bf16, H, act, (char*)P->X + (int64_t)s * H * asz, &P->Xs[s]);
    }
  }
  barrier(&P->bar_cnt, &P->bar_gen, nth);

  // 2. gate/up + silu
  int nb = I / KT_NB;
  int items = e->nactive * nb;
  while ((item = atomic_fetch_add_explicit(&P->next[1], 1, memory_order_relaxed)) < items) {
    int x = e->active[item / nb], ib = item % nb;
    int m = e->cnt[x], off = e->off[x];
    kt_kernel kern = m >= e->pf_min ? e->kpf : e->kdec;
    for (int m0 = 0; m0 < m; m0 += KT_MCH) {
      int mm = m - m0 < KT_MCH ? m - m0 : KT_MCH;
      kt_act A = {(const char*)P->X + (int64_t)(off + m0) * H * asz, H, P->Xs + off + m0};
      kern(&ex[x].gate, ib * KT_NB, KT_NB, &A, mm, w->cg, KT_NB, &w->s);
      kern(&ex[x].up, ib * KT_NB, KT_NB, &A, mm, w->cu, KT_NB, &w->s);
      for (int i = 0; i < mm; i++)
        kt_silu_mul(w->cg + i * KT_NB, w->cu + i * KT_NB, P->Hf + (int64_t)(off + m0 + i) * I + ib * KT_NB, KT_NB,
                    e->isa);
    }
  }
  barrier(&P->bar_cnt, &P->bar_gen, nth);

  // 3. quantize h for the down projection
  while ((item = atomic_fetch_add_explicit(&P->next[2], 1, memory_order_relaxed)) < nchunks) {
    for (int s = item * 16; s < item * 16 + 16 && s < e->nslots; s++) {
      if (e->slot_tok[s] < 0) continue;
      kt_row_to_act(P->Hf + (int64_t)s * I, 0, I, act, (char*)P->Hq + (int64_t)s * I * asz, &P->Hs[s]);
    }
  }
  barrier(&P->bar_cnt, &P->bar_gen, nth);

  // 4. down + weighted sum into this pool's partial output
  int hb = H / KT_NB;
  while ((item = atomic_fetch_add_explicit(&P->next[3], 1, memory_order_relaxed)) < hb) {
    int h0 = item * KT_NB;
    for (int t = 0; t < e->ntok; t++) memset(P->out + (int64_t)t * H + h0, 0, KT_NB * sizeof(float));
    for (int a = 0; a < e->nactive; a++) {
      int x = e->active[a];
      int m = e->cnt[x], off = e->off[x];
      kt_kernel kern = m >= e->pf_min ? e->kpf : e->kdec;
      for (int m0 = 0; m0 < m; m0 += KT_MCH) {
        int mm = m - m0 < KT_MCH ? m - m0 : KT_MCH;
        kt_act A = {(const char*)P->Hq + (int64_t)(off + m0) * I * asz, I, P->Hs + off + m0};
        kern(&ex[x].down, h0, KT_NB, &A, mm, w->cd, KT_NB, &w->s);
        for (int i = 0; i < mm; i++) {
          int s = off + m0 + i;
          float wt = e->slot_w[s];
          float* o = P->out + (int64_t)e->slot_tok[s] * H + h0;
          const float* c = w->cd + i * KT_NB;
          for (int j = 0; j < KT_NB; j++) o[j] += wt * c[j];
        }
      }
    }
  }
  barrier(&e->gbar_cnt, &e->gbar_gen, e->nthreads);

  // 5. merge pools into the caller's output
  const int TCH = 4;
  int tchunks = (e->ntok + TCH - 1) / TCH;
  while ((item = atomic_fetch_add_explicit(&e->gnext, 1, memory_order_relaxed)) < tchunks) {
    for (int t = item * TCH; t < item * TCH + TCH && t < e->ntok; t++) {
      for (int h = 0; h < H; h++) {
        float v = 0;
        for (int p = 0; p < e->npools; p++) v += e->pools[p].out[(int64_t)t * H + h];
        int64_t at = (int64_t)t * H + h;
        if (b->out_bf16) {
          uint16_t* o = (uint16_t*)b->out;
          if (b->incremental) v += kt_bf16f(o[at]);
          o[at] = kt_f2bf(v);
        } else {
          float* o = (float*)b->out;
          if (b->incremental) v += o[at];
          o[at] = v;
        }
      }
    }
  }
}

static void* worker_main(void* arg) {
  kt_worker* w = (kt_worker*)arg;
  kt_engine* e = w->e;
  if (w->cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  _mm_setcsr(0x1f80);  // default MXCSR: no flush-to-zero (the fp8 decode relies on denormals)
  if (e->isa & KT_ISA_AMX) kt_amx_init_thread();
  int seen = 0;
  for (;;) {
    wait_change(&e->job_gen, seen);
    seen = atomic_load_explicit(&e->job_gen, memory_order_acquire);
    if (atomic_load(&e->quit)) break;
    run_job(w);
    if (atomic_fetch_add_explicit(&e->job_done, 1, memory_order_acq_rel) + 1 == e->nthreads) {
      atomic_fetch_add_explicit(&e->done_gen, 1, memory_order_release);
      futex_wake(&e->done_gen);
    }
  }
  return NULL;
}

// run_task executes one queued task on all pools and waits for it.
static void run_task(kt_engine* e, const kt_task* t) {
  e->l = t->l;
  e->b = t->b;
  if (route(e) != 0) return;
  int fmt = e->l->fmt, isa = e->isa;
  int act = kt_act_format(fmt, isa);
  int dec = (isa & KT_ISA_AVX512) ? KT_ISA_AVX512 : KT_ISA_AVX2;
  e->kdec = kt_pick_kernel(fmt, dec, isa);
  e->kpf = e->kdec;
  e->pf_min = INT_MAX;
  if (isa & KT_ISA_AMX) {
    e->kpf = kt_pick_kernel(fmt, KT_ISA_AMX, isa);
    e->pf_min = AMX_MIN_M;
  } else if ((isa & KT_ISA_AVX512) && (fmt == KT_FMT_BF16_RM || fmt == KT_FMT_FP8_RM)) {
    e->kpf = kt_pick_kernel(fmt, KT_ISA_AVX512 + 100, isa);
    e->pf_min = RMPF_MIN_M;
  }
  if (!e->kdec || !e->kpf) {
    task_error(e, "no kernel for this weight format on this CPU");
    return;
  }
  if (act_size(act) > e->pools[0].asz) {
    task_error(e, "activation format larger than the engine's buffers");
    return;
  }
  for (int p = 0; p < e->npools; p++) {
    e->pools[p].act = act;
    for (int i = 0; i < 4; i++) atomic_store_explicit(&e->pools[p].next[i], 0, memory_order_relaxed);
  }
  atomic_store_explicit(&e->gnext, 0, memory_order_relaxed);
  atomic_store_explicit(&e->job_done, 0, memory_order_relaxed);
  int dg = atomic_load_explicit(&e->done_gen, memory_order_acquire);
  atomic_fetch_add_explicit(&e->job_gen, 1, memory_order_release);
  futex_wake(&e->job_gen);
  while (atomic_load_explicit(&e->job_done, memory_order_acquire) < e->nthreads) {
    wait_change(&e->done_gen, dg);
    dg = atomic_load_explicit(&e->done_gen, memory_order_acquire);
  }
}

static void* queue_main(void* arg) {
  kt_engine* e = (kt_engine*)arg;
  for (;;) {
    pthread_mutex_lock(&e->mu);
    while (e->qhead == e->qtail && !atomic_load(&e->quit)) pthread_cond_wait(&e->cv_task, &e->mu);
    if (e->qhead == e->qtail) {
      pthread_mutex_unlock(&e->mu);
      break;
    }
    kt_task t = e->q[e->qhead % QCAP];
    e->qhead++;
    pthread_mutex_unlock(&e->mu);
    run_task(e, &t);
    pthread_mutex_lock(&e->mu);
    e->pending--;
    pthread_cond_broadcast(&e->cv_done);
    pthread_mutex_unlock(&e->mu);
  }
  return NULL;
}

// ---------------------------------------------------------------- public API

int kt_submit(kt_engine* e, const kt_layer* l, const kt_batch* b) {
  pthread_mutex_lock(&e->mu);
  if (e->qtail - e->qhead >= QCAP) {
    pthread_mutex_unlock(&e->mu);
    return -1;
  }
  e->q[e->qtail % QCAP].l = l;
  e->q[e->qtail % QCAP].b = *b;
  e->qtail++;
  e->pending++;
  pthread_cond_signal(&e->cv_task);
  pthread_mutex_unlock(&e->mu);
  return 0;
}

void kt_sync(kt_engine* e, int allow_pending) {
  pthread_mutex_lock(&e->mu);
  while (e->pending > allow_pending) pthread_cond_wait(&e->cv_done, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

int kt_take_error(kt_engine* e, char* msg, int msglen) {
  pthread_mutex_lock(&e->mu);
  int r = e->err;
  if (r && msg && msglen > 0) snprintf(msg, (size_t)msglen, "%s", e->errmsg);
  e->err = 0;
  e->errmsg[0] = 0;
  pthread_mutex_unlock(&e->mu);
  return r;
}

void kt_hostfn_submit(void* args) {
  kt_hostfn_args* a = (kt_hostfn_args*)args;
  if (kt_submit(a->e, a->l, &a->b) != 0) {
    kt_sync(a->e, 0);
    kt_submit(a->e, a->l, &a->b);
  }
}

void kt_hostfn_sync(void* args) {
  kt_hostfn_args* a = (kt_hostfn_args*)args;
  kt_sync(a->e, a->allow_pending);
}

typedef struct {
  void (*submit)(void*);
  void (*sync)(void*);
  void* arg;
} hostfn_pair;

static void* hostfn_thread(void* a) {
  hostfn_pair* h = (hostfn_pair*)a;
  h->submit(h->arg);
  h->sync(h->arg);
  return NULL;
}

int kt_run_on_thread(void (*submit)(void*), void (*sync)(void*), void* arg) {
  hostfn_pair h = {submit, sync, arg};
  pthread_t th;
  if (pthread_create(&th, NULL, hostfn_thread, &h) != 0) return -1;
  return pthread_join(th, NULL);
}

static void free_engine(kt_engine* e) {
  if (e->workers) {
    for (int i = 0; i < e->nthreads; i++) {
      kt_worker* w = &e->workers[i];
      kt_free(w->s.pack, 0);
      free(w->s.ci);
      free(w->cg);
      free(w->cu);
      free(w->cd);
    }
    free(e->workers);
  }
  for (int p = 0; p < e->npools; p++) {
    kt_pool* P = &e->pools[p];
    kt_free(P->X, P->bytesX);
    kt_free(P->Hf, P->bytesH);
    kt_free(P->Hq, P->bytesHq);
    kt_free(P->out, P->bytesOut);
    free(P->Xs);
    free(P->Hs);
  }
  free(e->cnt);
  free(e->off);
  free(e->active);
  free(e->slot_tok);
  free(e->slot_w);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv_task);
  pthread_cond_destroy(&e->cv_done);
  free(e);
}

void kt_engine_free(kt_engine* e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  atomic_store(&e->quit, 1);
  pthread_cond_broadcast(&e->cv_task);
  pthread_mutex_unlock(&e->mu);
  if (e->qstarted) pthread_join(e->qthread, NULL);
  atomic_fetch_add(&e->job_gen, 1);
  futex_wake(&e->job_gen);
  for (int i = 0; e->workers && i < e->nthreads; i++)
    if (e->workers[i].started) pthread_join(e->workers[i].th, NULL);
  free_engine(e);
}

static void* xalloc(size_t n) {
  void* p = NULL;
  if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
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
  kt_engine* e = (kt_engine*)calloc(1, sizeof *e);
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
  e->max_slots = (int64_t)cfg->max_tokens * cfg->max_k + 16LL * cfg->nexp + 32;
  e->cnt = (int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->off = (int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->active = (int*)xalloc(sizeof(int) * (size_t)cfg->nexp);
  e->slot_tok = (int*)xalloc(sizeof(int) * (size_t)e->max_slots);
  e->slot_w = (float*)xalloc(sizeof(float) * (size_t)e->max_slots);
  if (!e->cnt || !e->off || !e->active || !e->slot_tok || !e->slot_w) FAIL("out of memory for routing tables");
  int64_t asz = (cfg->isa & (KT_ISA_AMX | KT_ISA_AVX512BF16)) ? 2 : 4;
  for (int p = 0; p < e->npools; p++) {
    kt_pool* P = &e->pools[p];
    P->asz = asz;
    P->max_slots = e->max_slots;
    P->bytesX = e->max_slots * H * asz;
    P->bytesH = e->max_slots * I * 4;
    P->bytesHq = e->max_slots * I * asz;
    P->bytesOut = (int64_t)cfg->max_tokens * H * 4 + 64;
    P->X = kt_alloc(P->bytesX, P->node);
    P->Hf = (float*)kt_alloc(P->bytesH, P->node);
    P->Hq = kt_alloc(P->bytesHq, P->node);
    P->out = (float*)kt_alloc(P->bytesOut, P->node);
    P->Xs = (float*)xalloc(sizeof(float) * (size_t)e->max_slots);
    P->Hs = (float*)xalloc(sizeof(float) * (size_t)e->max_slots);
    if (!P->X || !P->Hf || !P->Hq || !P->out || !P->Xs || !P->Hs)
      FAIL("out of memory for the scratch buffers of pool %d (%lld MiB)", p,
           (long long)((P->bytesX + P->bytesH + P->bytesHq + P->bytesOut) >> 20));
  }
  e->workers = (kt_worker*)calloc((size_t)e->nthreads, sizeof(kt_worker));
  if (!e->workers) FAIL("out of memory");
  int maxk = H > I ? H : I;
  for (int p = 0, g = 0; p < e->npools; p++)
    for (int i = 0; i < cfg->threads[p]; i++, g++) {
      kt_worker* w = &e->workers[g];
      w->e = e;
      w->pool = p;
      w->local = i;
      w->global = g;
      w->cpu = (cfg->pin && cfg->cpus && g < cfg->ncpus) ? cfg->cpus[g] : -1;
      w->s.pack = kt_alloc((int64_t)KT_NB * maxk * 2, e->pools[p].node);
      w->s.ci = (int32_t*)xalloc(sizeof(int32_t) * KT_MCH * KT_NB);
      w->cg = (float*)xalloc(sizeof(float) * KT_MCH * KT_NB);
      w->cu = (float*)xalloc(sizeof(float) * KT_MCH * KT_NB);
      w->cd = (float*)xalloc(sizeof(float) * KT_MCH * KT_NB);
      if (!w->s.pack || !w->s.ci || !w->cg || !w->cu || !w->cd) FAIL("out of memory for thread scratch");
    }
  if (cfg->pin && cfg->cpus) {
    for (int g = 0; g < e->nthreads && g < cfg->ncpus; g++) e->workers[g].cpu = cfg->cpus[g];
  }
  for (int g = 0; g < e->nthreads; g++) {
    if (pthread_create(&e->workers[g].th, NULL, worker_main, &e->workers[g]) != 0)
      FAIL("cannot start worker thread %d: %s", g, strerror(errno));
    e->workers[g].started = 1;
  }
  if (pthread_create(&e->qthread, NULL, queue_main, e) != 0) FAIL("cannot start the queue thread");
  e->qstarted = 1;
  return e;
#undef FAIL
}

// ---------------------------------------------------------------- bandwidth probe

typedef struct {
  const char* p;
  int64_t bytes;
  int reps, isa, cpu;
  _Atomic int* go;
  uint64_t sink;
} probe_arg;

static void* probe_main(void* arg) {
  probe_arg* a = (probe_arg*)arg;
  if (a->cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  while (!atomic_load(a->go)) _mm_pause();
  uint64_t s = 0;
  for (int r = 0; r < a->reps; r++)
    s ^= (a->isa & KT_ISA_AVX512) ? kt_avx512_sum_bytes(a->p, a->bytes) : kt_avx2_sum_bytes(a->p, a->bytes);
  a->sink = s;
  return NULL;
}

double kt_stream_read(const void* buf, int64_t bytes, int nthreads, int reps, int isa) {
  if (nthreads < 1) nthreads = 1;
  if (nthreads > 1024) nthreads = 1024;
  probe_arg* args = (probe_arg*)calloc((size_t)nthreads, sizeof(probe_arg));
  pthread_t* th = (pthread_t*)calloc((size_t)nthreads, sizeof(pthread_t));
  if (!args || !th) {
    free(args);
    free(th);
    return -1;
  }
  cpu_set_t allowed;
  int cpus[1024], ncpu = 0;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE && ncpu < 1024; c++)
      if (CPU_ISSET(c, &allowed)) cpus[ncpu++] = c;
  _Atomic int go = 0;
  int64_t chunk = (bytes / nthreads) & ~(int64_t)255;
  int started = 0;
  for (int i = 0; i < nthreads; i++) {
    args[i].p = (const char*)buf + chunk * i;
    args[i].bytes = chunk;
    args[i].reps = reps;
    args[i].isa = isa;
    args[i].cpu = ncpu ? cpus[i % ncpu] : -1;
    args[i].go = &go;
    if (pthread_create(&th[i], NULL, probe_main, &args[i]) == 0) started++;
    else break;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  atomic_store(&go, 1);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  free(args);
  free(th);
  return started == nthreads ? secs : -1;
}
