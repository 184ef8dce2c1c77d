// engine.c: worker pools, task queue, routing and the phases of one MoE layer.
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
#define SPIN_NS 500000      // default spin budget before sleeping (kt_engine_config.spin_ns; Go: DefaultSpinWait)
#define SPIN_PURE_NS 30000  // the first part of a spin only pauses
#define SYNC_SPIN_NS 5000000  // kt_sync spins this much longer
#define LINE 128  // hot atomics get a line pair each (the adjacent-line prefetcher pulls pairs)
#define DNX (LINE / (int)sizeof(int))  // ints between two experts' down-item counters (one line pair each)
#define FUSED_MAX_SLOTS 512
// FUSED_ITEMS is how many down items per thread the decode path aims for:
// more items make a shorter tail, fewer a longer weight run per item (4
// measured within the noise of 8)
#define FUSED_ITEMS 8
#define AMX_MIN_M 8
// AMXINT4 experts take the AMX kernels from 4 tokens: with the fused unpack
// (kern_amx_core.h CORE_FN4) faster than the VNNI decode kernels at 4-7
// (device, session 18 call 4: --amx-min-tokens 4 against 8 at 64-256 tokens,
// alternated twice, faster in 11 of 12 pairs; INT4_KGROUP mixed, stays 8)
#define AMX_MIN_M_I4 4
#define RMPF_MIN_M 8
// default kt_engine_config.amx_nxl by activation format: bf16 prefill calls
// prefetch 4 lines of the next call's weights per tile step (device, session
// 6 call 5: Qwen3-30B AMXBF16 at 4096 tokens faster than none in 4 of 4
// alternated rounds, median -6%); int8 none (mixed)
#define AMX_NXL_BF16 4
#define AMX_NXL_S8 0

// kt_cursor is an atomic counter on a line pair of its own.
typedef struct {
  _Alignas(LINE) _Atomic int v;
} kt_cursor;

// kt_pfreg is one region a prefetch task reads: rows of rb bytes, stride
// bytes apart; chunks c0.. of the pool's chunk sequence are its.
typedef struct {
  const char* p;
  int64_t rows, rb, stride, c0;
} kt_pfreg;

#define PF_CHUNK 8192  // bytes a prefetching worker claims at a time (and checks for a newer task)
// PF_STEP is how many bytes an owned prefetch reads between two checks for a
// newer task: the forward task queued behind starts once every worker has
// left the prefetch, so its start waits for the slowest worker's step
// (4 KiB: ~0.5 us at a core's share of the read bandwidth, where a whole
// 32-row int4 block took ~4 us).
#define PF_STEP 4096
#define PF_REGS (KT_PF_MAX * 9)  // regions per pool: weights, scales, corrections of three matrices

typedef struct {
  int nthreads, node, tbase;
  int act;         // activation format of the current task
  int64_t asz;     // max bytes per activation element
  int64_t max_slots;
  void* X;
  float* Xs;
  void* Xt;   // [max_tokens][hidden] converted once per token
  // the other Xt: phased tasks alternate between the two, so a task's
  // conversion does not write lines that the last task's gathers left
  // shared in many cores' caches
  void* Xt2;
  // the converted rows the current task reads: Xt, or (bf16 rows for bf16
  // activations, one pool) the batch's own x, which needs no conversion
  const char* xin;
  float* Xts;
  float* Hf;
  void* Hq;
  float* Hs;
  float* Y;  // [max_slots][hidden]: each slot's down output, this pool's slice (bf16 when ybf16)
  int64_t bytesX, bytesH, bytesHq, bytesOut, bytesXt;
  _Atomic int* gud;  // [nexp] gate/up items finished per expert (phased path)
  // work counters and barrier words on lines of their own: each item's
  // fetch_add would otherwise take the line of the read-only fields above
  // away from every other thread
  struct {
    _Alignas(LINE) _Atomic int v;
  } next[5];
  _Alignas(LINE) _Atomic int pfnext;  // prefetch task: chunks claimed
  kt_pfreg* pfreg;                     // prefetch task: this pool's regions [PF_REGS]
  int npfreg;
  int64_t npfch;                       // ... and their chunks
  _Alignas(LINE) _Atomic int bar_cnt;
  _Alignas(LINE) _Atomic int bar_gen;
  _Alignas(LINE) char pad_;
} kt_pool;

typedef struct {
  _Alignas(LINE) struct kt_engine* e;  // one worker per line pair: a worker writes its own fields during a task
  int pool, local, global, cpu;
  kt_scratch s;
  float *cg, *cu, *cd;
  char* park;  // gate/up K slabs: the parked sums of a group of row blocks (KT_PARK bytes)
  void* trow;  // one converted row before it is stored in tile order
  // phased AMX prefill: an expert's activation rows gathered in tile order
  // (xa, row scales xas) by each of its gate/up items (gather_rows)
  char* xa;
  float* xas;
  const void** parts;  // merge: [max_k * npools]
  float* pw;
  pthread_t th;
  int started;
  // trace of the current fused task (kt_engine_config.trace)
  int64_t tr_seen, tr_gu, tr_end;
  int64_t tr_guw, tr_dnw;  // ns inside gate/up and down blocks (fused task, trace)
  int tr_items;
  uint32_t pf_sink;  // prefetch tasks: a value of the loaded lines (keeps the loads)
} kt_worker;

typedef struct {
  const kt_layer* l;
  kt_batch b;
  int64_t t_sub;  // trace: when kt_submit queued it
  // a prefetch task (kt_prefetch): the experts whose weights it reads, in
  // the order given (most likely first); npf 0 = a forward task
  int npf;
  int32_t pf[KT_PF_MAX];
} kt_task;

struct kt_engine {
  kt_engine_config cfg;
  int npools, nthreads, isa;
  kt_pool pools[8];
  kt_worker* workers;

  int trace;
  int64_t spin_ns, spin_pure_ns;  // spin_step's budget and its pause-only start
  _Atomic int* dnx;  // fused down items claimed per active expert, one line pair each (DNX ints apart)

  // hot words, one line pair each
  _Alignas(LINE) _Atomic int job_gen;
  _Alignas(LINE) _Atomic int job_done;
  _Alignas(LINE) _Atomic int done_gen;
  _Alignas(LINE) _Atomic int gbar_cnt;
  _Alignas(LINE) _Atomic int gbar_gen;
  _Alignas(LINE) _Atomic int gnext;
  _Alignas(LINE) _Atomic int nsleep;  // threads sleeping in futex_wait
  _Alignas(LINE) _Atomic int quit;
  _Atomic int ready;       // threads that finished their start-up
  _Atomic int amx_failed;  // a thread could not configure AMX tiles

  // fused (decode) path: per-expert progress, reset for the active experts of each task
  int fused, fused_max, r4f;
  int mch;  // prefill tokens per kernel call (<= KT_MCH, multiple of 32); 0: by format (prefill_chunk)
  int64_t xabytes;  // each worker's xa
  _Atomic int* xst;   // activations of the expert's slots: 0 = not converted, 1 = converting, 2 = ready
  _Atomic int* gud;   // gate/up items finished
  _Atomic int* hqst;  // 1 = h of the expert quantized (down may run)
  _Atomic int* hbd;   // per hidden block: down items finished (fused path)
  _Atomic int* tokst; // [max_tokens]: = seq once the token's row is converted
  // owned path (cfg.owned): the gate/up items of each worker in expert
  // order (oitems[ooff[w] .. ooff[w]+ocnt[w]), set by owned_setup) and the
  // cursor its owner, then thieves, take them by (one line pair each)
  int owned;  // the current fused task takes owned items (owned_setup)
  int *oitems, *ooff, *ocnt;
  kt_cursor* ocur;
  // cfg.miss_pf: the experts of the owned prefetch task run first (pfmark[x]
  // == pfgen for layer pflayer), each worker's first item of the others
  // (mfirst[w], an index into its list) and the byte ranges of every listed
  // item's weights, scales and corrections (mrng: MISS_RNG pairs per item,
  // in oitems' order; the worker's side stream from mfirst on)
  uint32_t* pfmark;
  uint32_t pfgen;
  const kt_layer* pflayer;
  int* mfirst;
  int64_t* mrng;
  int seq;            // task number (wraps; a stale tokst equal to it would need 2^32 tasks)

  // current task, written by the queue thread before a job starts
  int pfjob;    // the job is a prefetch task's (run_prefetch)
  int pf_tail;  // ... which stops reading once qtail moves past it (a task queued behind it)
  int pf_own;               // ... reads the owned path's blocks (cfg.owned)
  const kt_task* pft;       // ... of this task's experts
  _Atomic int64_t pf_planned;  // bytes the prefetch tasks so far were to read
  _Atomic int64_t pf_read;     // ... and read before a task queued behind stopped them
  const kt_layer* l;
  kt_batch b;
  int ntok;
  kt_kernel kdec, kpf;
  kt_kernel kpfd;  // prefill kernel of the down projection (kpf, or kdec where kpf cannot take the K)
  int pf_min;
  int nxl;  // lines of the next call's weights an AMX prefill call prefetches per tile step (set_nx)
  int rm_pack;  // prefill packs row-major weights into panels first
  int pf_tiled;  // prefill kernels are AMX: prefill experts' activations are stored in tile order
  int ybf16;     // the slot outputs Y are bf16 (down_block, merge_token)
  int early;  // the workers convert the rows while the queue thread routes (run_task)
  int hbf16;     // int8 activations: h waits for its quantization as bf16 in Hf's memory (h_row)
  uint8_t* blk_tiled;  // per 16-slot block: 0 row-major, 1 tile order (kt_act.tiled), 2 tile order in the workers' xa
  int64_t packbytes;

  // routing
  int64_t max_slots;
  int* cnt;
  int* off;
  int* active;
  int nactive, nslots;
  int* slot_tok;
  float* slot_w;
  int* tok_slot;  // [max_tokens][max_k]: slot of (t, j), -1 = skipped

  // queue
  pthread_mutex_t mu;
  pthread_cond_t cv_task, cv_done;
  kt_task q[QCAP];
  // kt_submit writes a slot, then qtail (release; under mu among several
  // submitters); the queue thread reads the slot after an acquire load of
  // qtail, without the mutex, and sleeps on cv_task (qsleep, under mu) only
  // after spinning. pending drops when a task is done (its writes are then
  // visible); kt_sync spins on it and sleeps on cv_done only after spinning
  // (nsyncw counts the sleepers: the queue thread takes the mutex to wake
  // them only when there are some). No mutex on the hot path: a thread that
  // sees the change and then blocks on a mutex the other side still holds
  // pays a futex sleep and wake-up (16-25 us per task on a 2-vCPU VM).
  _Alignas(LINE) _Atomic int qhead;
  _Alignas(LINE) _Atomic int qtail;
  _Alignas(LINE) _Atomic int pending;
  _Alignas(LINE) _Atomic int nsyncw;
  int qsleep;  // the queue thread waits on cv_task (under mu)
  pthread_t qthread;
  int qstarted;

  int err;
  char errmsg[256];

  // phase timing (queue thread only; read between tasks)
  int64_t ph_ns[KT_NPHASES];
  int64_t ph_tasks[2];
  int64_t ph_t;

  // trace (kt_engine_config.trace): sums, and the times the callers need
  int64_t tr_pub, tr_pick;
  int tr_last;  // the last task was traced
  _Atomic int64_t tr[KT_TR_N];
  _Atomic int64_t *tr_wend, *tr_wseen;  // [nthreads]
  _Atomic int64_t tr_compl, tr_ret;
};

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
static void wake(_Atomic int* nsleep, _Atomic int* addr) {
  if (atomic_load_explicit(nsleep, memory_order_seq_cst) > 0)
    syscall(SYS_futex, (int*)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline int64_t now_ns(void);

// A spin of bounded time: spin_step pauses, and returns 0 once the engine's
// spin budget (spin_ns, measured from the first step) is spent and the
// caller should sleep. The first spin_pure_ns only pause; after that every
// 32nd step yields, so that a thread that shares the core (the Go runtime's,
// the driver's) gets it. A bound in time, not in rounds: a PAUSE costs from
// ~10 to ~140 cycles depending on the CPU, and a round count that meant
// 0.3 ms on one CPU meant ~50 us on another, where workers went to sleep
// between back-to-back decode tasks and paid a futex wake-up (tens of us in a
// VM) at the start of the next.
typedef struct {
  int64_t t0;
  unsigned i;
  int64_t extra;  // spin this much longer than spin_ns (kt_sync: a task is running)
} kt_spin;

static inline int spin_step(const kt_engine* e, kt_spin* s) {
  if ((++s->i & 31) != 0) {
    _mm_pause();
    return 1;
  }
  int64_t t = now_ns();
  if (!s->t0) s->t0 = t;
  int64_t el = t - s->t0;
  if (el >= e->spin_ns + (e->spin_ns > 0 ? s->extra : 0)) return 0;
  if (el >= e->spin_pure_ns)
    sched_yield();
  else
    _mm_pause();
  return 1;
}

// wait_change waits until *addr != old: spinning (spin_step), then sleeping.
static void wait_change(kt_engine* e, _Atomic int* addr, int old) {
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

// spin_pause is one step of a short wait for another worker's item.
static inline void spin_pause(int* spins) {
  if ((++*spins & 255) == 0)
    sched_yield();  // an oversubscribed machine: let the thread we wait for run
  else
    _mm_pause();
}

static void barrier(kt_engine* e, _Atomic int* cnt, _Atomic int* gen, int n) {
  _Atomic int* nsleep = &e->nsleep;
  if (n <= 1) return;
  int g = atomic_load_explicit(gen, memory_order_acquire);
  if (atomic_fetch_add_explicit(cnt, 1, memory_order_acq_rel) == n - 1) {
    atomic_store_explicit(cnt, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(gen, 1, memory_order_seq_cst);
    wake(nsleep, gen);
  } else {
    wait_change(e, gen, g);
  }
}

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// ph_mark ends phase ph at the current time (queue thread only).
static inline void ph_mark(kt_engine* e, int ph) {
  int64_t t = now_ns();
  e->ph_ns[ph] += t - e->ph_t;
  e->ph_t = t;
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

// route buckets the task's (token, k) pairs by expert (task_setup has
// checked the batch).
static void route(kt_engine* e) {
  const kt_layer* l = e->l;
  const kt_batch* b = &e->b;
  int ntok = e->ntok;
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
      int pad = (e->cnt[x] + KT_TBLK - 1) & ~(KT_TBLK - 1);  // tile-order blocks never straddle experts
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
      e->tok_slot[(int64_t)t * b->k + j] = -1;
      if (id < 0 || id >= E) continue;
      if (l->skip && l->skip[id]) continue;
      int s = e->off[id] + e->cnt[id]++;
      e->tok_slot[(int64_t)t * b->k + j] = s;
      e->slot_tok[s] = t;
      e->slot_w[s] = b->wts[(int64_t)t * b->k + j];
    }
}

// ---------------------------------------------------------------- phases

static int64_t act_size(int act) { return act == KT_ACT_F32 ? 4 : act == KT_ACT_BF16 ? 2 : 1; }

// CONV_ISA calls the conversion fn (convert.h) of the engine's vector width.
#define CONV_ISA(fn, ...)           \
  do {                              \
    if (e->isa & KT_ISA_AVX512)     \
      kt_avx512_##fn(__VA_ARGS__);  \
    else                            \
      kt_avx2_##fn(__VA_ARGS__);    \
  } while (0)
#define ROW_TO_ACT(...) CONV_ISA(row_to_act, __VA_ARGS__)

#define PACK_RM(W, n0, nn, dst)               \
  do {                                        \
    if (e->isa & KT_ISA_AVX512)               \
      kt_avx512_pack_rm((W), (n0), (nn), (dst)); \
    else                                      \
      kt_pack_rm_to_bf16pk((W), (n0), (nn), (dst)); \
  } while (0)

static void run_job_fused(kt_worker* w);
static int amx_kernel(kt_kernel k);

// put_act_row converts a row of n elements (f32, or bf16 when src_bf16) to
// the activation format and stores it as row s of buf, in tile order when
// tiled.
static void put_act_row(kt_engine* e, kt_worker* w, const void* src, int src_bf16, int n, int act, char* buf, int64_t s,
                        float* scale, int tiled) {
  int64_t rb = (int64_t)n * act_size(act);
  if (!tiled) {
    ROW_TO_ACT(src, src_bf16, n, act, buf + s * rb, scale, w->s.row);
    return;
  }
  ROW_TO_ACT(src, src_bf16, n, act, w->trow, scale, w->s.row);
  kt_put_row(buf, s, rb, w->trow, 1);
}

// h_row is where slot s's h row waits for its quantization: f32 rows of
// P->Hf, or bf16 rows in the same memory when e->hbf16.
static inline const void* h_row(const kt_engine* e, const kt_pool* P, int64_t s, int I) {
  return e->hbf16 ? (const void*)((const uint16_t*)P->Hf + s * I) : (const void*)(P->Hf + s * I);
}

// y_at is where slot s's down output for hidden row h lies in P->Y, whose
// rows ([slot][hidden]) are y_ld(e) elements apart.
static inline char* y_at(const kt_engine* e, const kt_pool* P, int64_t s, int h) {
  int64_t ysz = e->ybf16 ? 2 : 4;
  return (char*)P->Y + (s * e->l->hidden + h) * ysz;
}

static inline int y_ld(const kt_engine* e) { return e->l->hidden; }

// pair_bytes returns where weight rows [n0, n0+32) of W start in the packed
// formats the AMX kernels read, and their length, or NULL (other formats,
// rows past the end): what a kernel call prefetches into L2 for the next.
static const char* pair_bytes(const kt_engine* e, const kt_mat* W, int n0, int64_t* nb) {
  int64_t per16 = panel_bytes(e->l->fmt, W->k);
  if (n0 < 0 || n0 + KT_NB > W->n || !e->pf_tiled || e->rm_pack || !per16) return NULL;
  *nb = 2 * per16;
  return (const char*)W->w + (int64_t)(n0 / 16) * per16;
}

// KT_MCH_BF16 and KT_MCH_S8 are the prefill tokens per kernel call when
// the configuration leaves it to the format. Measured on the 16-core AMX
// machine: bf16 kernel calls over 128 tokens beat 256 alone (BenchmarkAMXKernel,
// K 2048: 128 x 4 KiB of activations leave L2 room for the streamed weights);
// int8 layers ran 15-19% faster with 512-token calls than with 128 (six of
// six alternated pairs, Qwen3-30B at 4096 tokens, docs/notes/session5_run).
#define KT_XA_ROWS 512  // bf16 rows of the per-worker gather buffer (gather_rows); int8: twice as many
#define KT_MCH_BF16 128
#define KT_MCH_S8 512

// prefill_chunk is the most tokens of one expert per prefill kernel call
// over activations of format act.
static inline int prefill_chunk(const kt_engine* e, int act) {
  if (e->mch > 0) return e->mch;
  return act == KT_ACT_S8 ? KT_MCH_S8 : KT_MCH_BF16;
}

// xa_rows is how many activation rows of format act a worker's gather
// buffer holds: the most tokens of an expert that gather_rows takes.
static inline int xa_rows(const kt_engine* e, int act) {
  return (int)(e->xabytes / ((int64_t)e->l->hidden * act_size(act)));
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

// gate_up_block computes h = silu(gate·x) ⊙ up·x for intermediate rows
// [n0, n0+KT_NB) of expert x over all its slot rows, into P->Hf. Row-major
// weights are packed once for the block when the prefill kernel runs.
// With bf16 activations the conversion is per element, so the block's h is
// converted here and stored straight into P->Hq (its 32 bf16 values are one
// 64-byte column chunk of a tile-order row): no f32 h, no quantize pass.
static void gate_up_block(kt_engine* e, kt_worker* w, kt_pool* P, const kt_expert* xe, int x, int n0, int H, int I,
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

// KT_SLAB is the default activation bytes of one gate/up kernel call (cfg.amx_slab)
// above which gate_up_rows runs K in slabs: Qwen3-30B's int8 calls (512 rows of
// K 2048, 1 MiB) stay whole; DeepSeek-V3's (K 7168: 128 bf16 rows, 1.8 MiB, or
// 512 int8 rows, 3.5 MiB) did not stay in L2 with the streamed weights, and
// gate/up ran at half the tile probe's rate there (docs/notes/session15_run).
// KT_PARK is each worker's room for the parked sums of a group of row blocks.
#define KT_SLAB (1 << 20)
#define KT_PARK (512 << 10)

// gate_up_rows computes h for intermediate rows [r0, r1) of expert x
// (gate_up_block per 32-row block).
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
  if (m < e->pf_min || !amx_kernel(e->kpf) || e->rm_pack || slab <= 0 || abytes <= slab || nkc < 4) {
    for (int n0 = r0; n0 < r1; n0 += KT_NB) gate_up_block(e, w, P, xe, x, n0, H, I, asz, n0 + KT_NB < r1);
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

// down_block computes y = down·h for hidden rows [h0, h0+r4) of expert x
// over all its slot rows, into P->Y at y_at (f32, or bf16 when e->ybf16:
// the kernel writes a chunk's f32 rows into the worker's cd, which are
// rounded into Y). Every output element comes from one kernel call over the
// full intermediate width, so the loop order does not change results.
static void down_block(kt_engine* e, kt_worker* w, kt_pool* P, const kt_expert* xe, int x, int h0, int r4, int H,
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
  int kbf16 = e->ybf16 && pf && amx_kernel(kern);
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

// merge_token writes out[t][h0:h0+n] = Σ w·Y over the token's slots (top-k
// order) and the pools (pool order), adding to out when incremental.
static void merge_token(kt_engine* e, kt_worker* w, int t, int h0, int n, int H) {
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

// item_block is the rows per work item over n rows of every active expert:
// the largest of rmax, rmax/2, ... above KT_NB that divides n and still
// gives at least want items, else KT_NB.
static int item_block(const kt_engine* e, int n, int rmax, int64_t want) {
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

// ---------------------------------------------------------------- prefetch tasks

// block_owner is the worker (of T) that owns row block blk of expert x's
// nb (cfg.owned): (x*nb + blk) % T, which depends on the expert's id only,
// so that a prefetch task of the predicted experts reads each block on the
// core that will compute it.
static inline int block_owner(int x, int blk, int nb, int T) { return (int)(((int64_t)x * nb + blk) % T); }

// owned_block is the first row block of expert x that worker me owns (then
// every T-th).
static inline int owned_block(int x, int nb, int T, int me) { return ((me - block_owner(x, 0, nb, T)) % T + T) % T; }

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
  int64_t ns = fmt == KT_FMT_I4G_PK && W->group > 0 ? n * (k / W->group) : n;
  pf_add(P, W->scale, 1, ns * 4, 0);
  pf_add(P, W->corr, 1, ns * 4, 0);
}

// pf_read reads the lines of bytes [lo, hi) of region r, one load a line
// (sequential loads, which the L2 streamer runs ahead of, as the read probe;
// returns a value that depends on every load, so none is dropped). Measured
// against prefetcht1 hints and loads followed by cldemote (session 16 calls
// 1-2): no faster.
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

// pf_block sets r to the bytes of rows [n0, n0+KT_NB) of W (format fmt)
// and s, c to their scales and corrections (rows 0 when there are none);
// returns the bytes of all three.
static int64_t pf_block(int fmt, const kt_mat* W, int n0, kt_pfreg* r, kt_pfreg* s, kt_pfreg* c) {
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
  if (fmt == KT_FMT_I4G_PK) sper16 = W->group > 0 ? k / W->group * 16 * 4 : 0;  // per row and group
  *r = (kt_pfreg){(const char*)W->w + (int64_t)(n0 / 16) * per16, 1, 2 * per16, 0, 0};
  if (W->scale && sper16) *s = (kt_pfreg){(const char*)W->scale + (int64_t)(n0 / 16) * sper16, 1, 2 * sper16, 0, 0};
  if (W->corr && sper16) *c = (kt_pfreg){(const char*)W->corr + (int64_t)(n0 / 16) * sper16, 1, 2 * sper16, 0, 0};
  return 2 * per16 + (W->scale ? 2 * sper16 : 0) + (W->corr ? 2 * sper16 : 0);
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
        int64_t b = pf_block(l->fmt, g ? &x->up : &x->gate, blk * KT_NB, &r[0], &r[1], &r[2]);
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

// run_prefetch_job is a worker's part of a prefetch task: chunks of its
// pool's regions in order, until they run out or a task is queued behind.
static void run_prefetch_job(kt_worker* w) {
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

static void run_job(kt_worker* w) {
  kt_engine* e = w->e;
  if (e->pfjob) {
    run_prefetch_job(w);
    return;
  }
  if (e->fused) {
    run_job_fused(w);
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
    barrier(e, &e->gbar_cnt, &e->gbar_gen, e->nthreads);
  else
    barrier(e, &P->bar_cnt, &P->bar_gen, nth);
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
  barrier(e, &P->bar_cnt, &P->bar_gen, nth);
  if (timer) ph_mark(e, KT_PH_GATHER);

  // 2. gate/up + silu; items are (expert, r2 intermediate rows): long items
  // read (or gather, gather_rows) an expert's activations fewer times, as
  // long as every thread still gets ~8 items. 256-row items only where the
  // experts average 64 tokens or more (compute-bound; in the device A/B at
  // 512 tokens of Qwen3.5, 16 per expert, they were slower)
  int r2 = item_block(e, I, e->nslots >= 64 * e->nactive ? 256 : 128, 8 * nth);
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
      put_act_row(e, w, h_row(e, P, s, I), e->hbf16, I, act, (char*)P->Hq, s, &P->Hs[s], e->blk_tiled[s >> 4]);
  }
  barrier(e, &P->bar_cnt, &P->bar_gen, nth);
  if (timer) {
    ph_mark(e, KT_PH_GATEUP);
    ph_mark(e, KT_PH_QUANT);  // inside gate/up now
  }

  // 4. down: items are (expert, r4 hidden rows); Y[slot] = down(h[slot]) for this pool's slice
  int r4 = item_block(e, H, 256, 4 * nth);
  int hb = H / r4;
  whole = whole_items(e, nth, hb);
  items = whole + (e->nactive - whole) * hb;
  while ((item = atomic_fetch_add_explicit(&P->next[4].v, 1, memory_order_relaxed)) < items) {
    int x, h0, h1;
    item_rows(e, item, whole, hb, r4, H, &x, &h0, &h1);
    down_block(e, w, P, &ex[x], x, h0, h1 - h0, H, I, asz);
  }
  barrier(e, &e->gbar_cnt, &e->gbar_gen, e->nthreads);
  if (timer) ph_mark(e, KT_PH_DOWN);

  // 5. out[t] = sum over the token's slots (k order) and pools (pool order) of w * Y
  while ((item = atomic_fetch_add_explicit(&e->gnext, 1, memory_order_relaxed)) < e->ntok) merge_token(e, w, item, 0, H, H);
  _mm_sfence();  // the merge's stores around the caches are visible when the task completes
}

// ---------------------------------------------------------------- fused (decode) path
//
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

// MISS_RNG is how many byte ranges miss_ranges lists per gate/up item:
// the gate and up blocks' weights, scales and corrections.
#define MISS_RNG 6

// miss_ranges writes the MISS_RNG byte ranges [lo, hi) that gate/up item
// blk of expert xe reads (format fmt) to r; empty ones are [0, 0).
static void miss_ranges(int fmt, const kt_expert* xe, int blk, int64_t* r) {
  for (int g = 0; g < 2; g++) {
    kt_pfreg q[3];
    pf_block(fmt, g ? &xe->up : &xe->gate, blk * KT_NB, &q[0], &q[1], &q[2]);
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

// owned_setup lists each worker's gate/up items of the fused task in
// expert order (cfg.owned): item a*nb + blk goes to its block's owner.
// With cfg.miss_pf the experts the last owned prefetch of this layer read
// come first in every list; the others' items, from mfirst[w] on, are the
// worker's side stream (miss_stream).
static void owned_setup(kt_engine* e) {
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
  gate_up_block(e, w, P, &e->l->ex[x], x, n0, H, I, asz, 0);
  if (e->trace) w->tr_guw += now_ns() - t0;
  if (atomic_fetch_add_explicit(&e->gud[x], 1, memory_order_acq_rel) + 1 == nb) {
    // last gate/up item of x: every h row of x is complete; quantize them for down
    // (bf16: gate/up stored h already)
    for (int s = off; s < off + m && act != KT_ACT_BF16; s++)
      put_act_row(e, w, h_row(e, P, s, I), e->hbf16, I, act, (char*)P->Hq, s, &P->Hs[s], pf && e->pf_tiled);
    atomic_store_explicit(&e->hqst[x], 1, memory_order_release);
  }
}

static void run_job_fused(kt_worker* w) {
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
  // (owned_setup's lists: the blocks a prefetch task read into its
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
    down_block(e, w, P, &ex[x], x, h0, r4, H, I, asz);
    if (e->trace) w->tr_dnw += now_ns() - t0;
    if (atomic_fetch_add_explicit(&e->hbd[hb], 1, memory_order_acq_rel) + 1 != na) continue;
    // last expert of this hidden block: out[t][h0:h0+r4] for every token
    for (int t = 0; t < e->ntok; t++) merge_token(e, w, t, h0, r4, H);
  }
  w->tr_items = nitems;
}

// worker_init pins the calling thread and loads the AMX tile configuration.
static void worker_init(kt_worker* w) {
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
  worker_init(w);
  int seen = 0;
  for (;;) {
    wait_change(e, &e->job_gen, seen);
    seen = atomic_load_explicit(&e->job_gen, memory_order_acquire);
    if (atomic_load(&e->quit)) break;
    if (e->trace) w->tr_seen = now_ns();
    run_job(w);
    if (e->trace) w->tr_end = now_ns();
    if (atomic_fetch_add_explicit(&e->job_done, 1, memory_order_acq_rel) + 1 == e->nthreads) {
      atomic_fetch_add_explicit(&e->done_gen, 1, memory_order_seq_cst);
      wake(&e->nsleep, &e->done_gen);
    }
  }
  return NULL;
}

// trace_task adds the current fused task's per-thread times to the sums.
static void trace_task(kt_engine* e, const kt_task* t) {
  int64_t now = now_ns(), pub = e->tr_pub, n = e->nthreads;
  int64_t seen = 0, seenmax = 0, gu = 0, endmin = INT64_MAX, end = 0, endmax = 0, guw = 0, dnw = 0;
  int imin = INT_MAX, imax = 0;
  for (int i = 0; i < n; i++) {
    kt_worker* w = &e->workers[i];
    int64_t s = w->tr_seen - pub, d = w->tr_end - pub, g = w->tr_gu - pub;
    seen += s;
    guw += w->tr_guw;
    dnw += w->tr_dnw;
    seenmax = s > seenmax ? s : seenmax;
    gu = g > gu ? g : gu;
    end += d;
    endmin = d < endmin ? d : endmin;
    endmax = d > endmax ? d : endmax;
    imin = w->tr_items < imin ? w->tr_items : imin;
    imax = w->tr_items > imax ? w->tr_items : imax;
    atomic_fetch_add_explicit(&e->tr_wend[i], d, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->tr_wseen[i], s, memory_order_relaxed);
  }
  int64_t add[KT_TR_N] = {0};
  add[KT_TR_TASKS] = 1;
  add[KT_TR_SUB_PICK] = t->t_sub ? e->tr_pick - t->t_sub : 0;
  add[KT_TR_PICK_PUB] = pub - e->tr_pick;
  add[KT_TR_SEEN_AVG] = seen / n;
  add[KT_TR_SEEN_MAX] = seenmax;
  add[KT_TR_GU_MAX] = gu;
  add[KT_TR_GU_WORK] = guw / n;
  add[KT_TR_DN_WORK] = dnw / n;
  add[KT_TR_END_MIN] = endmin;
  add[KT_TR_END_AVG] = end / n;
  add[KT_TR_END_MAX] = endmax;
  add[KT_TR_ALLDONE] = now - pub;
  add[KT_TR_ITEMS_MIN] = imin;
  add[KT_TR_ITEMS_MAX] = imax;
  for (int i = 0; i < KT_TR_N; i++)
    if (add[i]) atomic_fetch_add_explicit(&e->tr[i], add[i], memory_order_relaxed);
  e->tr_pub = now;  // the completion's start (queue_main)
  e->tr_last = 1;
}

// amx_kernel reports whether k is an AMX tile kernel (real or, in tests,
// emulated: KT_ISA_AMX_EMU), which reads tile-order activations and needs
// the tile state of its thread.
static int amx_kernel(kt_kernel k) {
  return k == kt_amx_bf16pk || k == kt_amx_i8pk || k == kt_amx_i4pk || k == kt_amx_i4gpk || k == kt_amx_emu_bf16pk ||
         k == kt_amx_emu_i8pk || k == kt_amx_emu_i4pk || k == kt_amx_emu_i4gpk;
}

// task_setup picks the task's kernels and data formats, none of which
// depend on its routing, and sets e->ntok. It returns -1 (task_error) for a
// task that cannot run.
static int task_setup(kt_engine* e) {
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
  int fmt = e->l->fmt, isa = e->isa;
  int act = kt_act_format(fmt, isa);
  int dec = (isa & KT_ISA_AVX512) ? KT_ISA_AVX512 : KT_ISA_AVX2;
  e->kdec = kt_pick_kernel(fmt, dec, isa);
  e->kpf = e->kdec;
  e->pf_min = INT_MAX;
  e->rm_pack = (fmt == KT_FMT_BF16_RM || fmt == KT_FMT_FP8_RM) && (isa & (KT_ISA_AMX | KT_ISA_AVX512));
  if (isa & KT_ISA_AMX) {
    e->kpf = kt_pick_kernel(fmt, KT_ISA_AMX, isa);
    e->pf_min = e->cfg.amx_min_m > 0 ? e->cfg.amx_min_m : fmt == KT_FMT_I4_PK ? AMX_MIN_M_I4 : AMX_MIN_M;
  } else if ((isa & KT_ISA_AVX512) && (fmt == KT_FMT_BF16_RM || fmt == KT_FMT_FP8_RM)) {
    e->kpf = kt_pick_kernel(fmt, KT_ISA_AVX512 + 100, isa);
    e->pf_min = RMPF_MIN_M;
  }
  if (!e->kdec || !e->kpf) return task_error(e, "no kernel for this weight format on this CPU");
  if (act_size(act) > e->pools[0].asz) return task_error(e, "activation format larger than the engine's buffers");
  // The AMX int8 kernel takes K in steps of 64 columns (one tile): over a
  // pool's intermediate slice of 32 (mod 64) rows (AMXINT8 allows multiples
  // of 32) it would drop the last 32 and misread its weight panels, so that
  // down projection takes the decode kernel. (bf16 tiles take 32 columns,
  // and AMXINT4 slices are multiples of 128.)
  e->kpfd = e->kpf;
  e->nxl = e->cfg.amx_nxl != 0 ? e->cfg.amx_nxl : act == KT_ACT_BF16 ? AMX_NXL_BF16 : AMX_NXL_S8;
  if (e->kpf == kt_amx_i8pk || e->kpf == kt_amx_emu_i8pk)
    for (int p = 0; p < e->npools; p++)
      if (e->l->inter_p[p] % 64) e->kpfd = e->kdec;
  // AMX prefill reads its activations in tile order (1 KiB contiguous A tiles)
  e->pf_tiled = amx_kernel(e->kpf);
  if ((int64_t)e->l->hidden * act_size(act) % 64) e->pf_tiled = 0;
  for (int p = 0; p < e->npools; p++)
    if ((int64_t)e->l->inter_p[p] * act_size(act) % 64) e->pf_tiled = 0;
  // int8 activations: h is rounded to bf16 before its quantization (as
  // KTransformers' AMX MoE keeps gate and up outputs), so it is stored and
  // read back in half the bytes; not with LoRA, whose down reads f32 h
  e->hbf16 = act == KT_ACT_S8 && !e->l->lora && !e->cfg.h_f32;
  // slot outputs in bf16 (as KTransformers' AMX MoE keeps them): half the
  // memory traffic of the down outputs and the merge, one more rounding of
  // each expert's output; f32 for f32 activations and with LoRA, whose down
  // correction adds into Y
  e->ybf16 = act != KT_ACT_F32 && !e->l->lora && !e->cfg.y_f32 && e->l->hidden % 32 == 0;
  for (int p = 0; p < e->npools; p++) {
    e->pools[p].act = act;
    atomic_store_explicit(&e->pools[p].next[0].v, 0, memory_order_relaxed);
  }
  atomic_store_explicit(&e->gnext, 0, memory_order_relaxed);
  atomic_store_explicit(&e->job_done, 0, memory_order_relaxed);
  return 0;
}

// phased_inputs points each pool of a phased task at the rows its
// conversion writes, or (bf16 rows for bf16 activations, one pool; more
// pools keep a copy on their own node) at the batch's own rows.
static void phased_inputs(kt_engine* e) {
  int direct = e->npools == 1 && e->b.x_bf16 && e->pools[0].act == KT_ACT_BF16;
  for (int p = 0; p < e->npools; p++) {
    kt_pool* P = &e->pools[p];
    void* t = P->Xt;
    P->Xt = P->Xt2;
    P->Xt2 = t;
    P->xin = direct ? (const char*)e->b.x : (const char*)P->Xt;
  }
}

// routed_setup prepares what depends on the task's routing: the path's
// plan, the activation layout per slot block, the work counters.
static void routed_setup(kt_engine* e) {
  // blk_tiled per 16-slot block: 0 row-major, 1 tile order, 2 tile order in
  // the worker's xa, gathered by each gate/up item (phased path, experts of
  // at most xa_rows tokens: gather_rows)
  int xrows = xa_rows(e, e->pools[0].act);
  for (int a = 0; a < e->nactive; a++) {
    int x = e->active[a];
    uint8_t t = e->pf_tiled && e->cnt[x] >= e->pf_min;
    if (t && !e->fused && e->cnt[x] <= xrows) t = 2;
    for (int blk = e->off[x] >> 4; blk < (e->off[x] + e->cnt[x] + 15) >> 4; blk++) e->blk_tiled[blk] = t;
  }
  for (int p = 0; p < e->npools; p++) {
    for (int i = 1; i < 5; i++) atomic_store_explicit(&e->pools[p].next[i].v, 0, memory_order_relaxed);
    for (int a = 0; a < e->nactive; a++) atomic_store_explicit(&e->pools[p].gud[e->active[a]], 0, memory_order_relaxed);
  }
  if (e->l->lora) kt_lora_begin(e->l->lora, e->active, e->nactive, e->npools);
  if (e->fused) {
    e->seq = (int)((unsigned)e->seq + 1u);
    if (e->seq == 0) e->seq = 1;  // tokst starts zeroed
    for (int a = 0; a < e->nactive; a++) {
      int x = e->active[a];
      atomic_store_explicit(&e->xst[x], 0, memory_order_relaxed);
      atomic_store_explicit(&e->gud[x], 0, memory_order_relaxed);
      atomic_store_explicit(&e->hqst[x], 0, memory_order_relaxed);
      atomic_store_explicit(&e->dnx[(int64_t)a * DNX], 0, memory_order_relaxed);
    }
    // down items: the longest contiguous weight runs that still give every
    // thread ~FUSED_ITEMS items
    int H = e->l->hidden;
    e->r4f = item_block(e, H, 256, (int64_t)FUSED_ITEMS * e->nthreads);
    for (int i = 0; i < H / e->r4f; i++) atomic_store_explicit(&e->hbd[i], 0, memory_order_relaxed);
    e->owned = e->cfg.owned && e->ntok == 1;
    if (e->owned) owned_setup(e);
  }
}

// fused_fits reports whether the task's (token, expert) pairs fit the fused
// path's limit; it takes the task when some expert is active too.
static inline int fused_fits(const kt_engine* e) {
  return e->npools == 1 && e->fused_max > 0 && (int64_t)e->ntok * e->b.k <= e->fused_max;
}

// publish_job starts the workers on the job set up so far.
static inline void publish_job(kt_engine* e) {
  atomic_fetch_add_explicit(&e->job_gen, 1, memory_order_seq_cst);
  wake(&e->nsleep, &e->job_gen);
}

// wait_workers counts the queue thread (worker 0) out of the job and waits
// for every other worker to leave it (dg: done_gen before the job began).
static void wait_workers(kt_engine* e, int dg) {
  atomic_fetch_add_explicit(&e->job_done, 1, memory_order_acq_rel);
  while (atomic_load_explicit(&e->job_done, memory_order_acquire) < e->nthreads) {
    wait_change(e, &e->done_gen, dg);
    dg = atomic_load_explicit(&e->done_gen, memory_order_acquire);
  }
}

// task_release stores the batch's release value (kt_batch.release) once
// the task's outputs are complete or it failed: the first thing after its
// end, so that a GPU stream waiting on the word goes on without waiting for
// the completion, the caller's sync and its own store.
static inline void task_release(const kt_batch* b) {
  if (b->release) atomic_store_explicit((_Atomic uint32_t*)b->release, b->release_value, memory_order_release);
}

// run_task runs one task on every worker, the queue thread as worker 0. A
// task that is phased whatever its routing (several pools, or more pairs
// than the fused path takes) starts the workers before it is routed
// (e->early): they convert the token rows while the queue thread routes,
// and wait for it at the barrier behind the conversion. Then it waits for
// every worker to leave.
static void run_task(kt_engine* e, const kt_task* t) {
  e->l = t->l;
  e->b = t->b;
  e->ph_t = now_ns();
  e->tr_pick = e->ph_t;
  e->tr_last = 0;
  if (task_setup(e) != 0) {
    task_release(&e->b);
    return;
  }
  e->early = !fused_fits(e);
  int dg = atomic_load_explicit(&e->done_gen, memory_order_acquire);
  int traced = 0;
  if (e->early) {
    e->fused = 0;
    phased_inputs(e);
    publish_job(e);
    if (e->cfg.test_route_delay_us > 0) usleep((useconds_t)e->cfg.test_route_delay_us);
    route(e);
    routed_setup(e);
    ph_mark(e, KT_PH_ROUTE);
  } else {
    route(e);
    e->fused = e->nactive > 0 && fused_fits(e);
    if (!e->fused) phased_inputs(e);
    routed_setup(e);
    traced = e->trace && e->fused;
    ph_mark(e, KT_PH_ROUTE);
    if (traced) {
      e->tr_pub = now_ns();
      e->workers[0].tr_seen = e->tr_pub;
    }
    publish_job(e);
  }
  run_job(&e->workers[0]);  // the queue thread is worker 0
  if (traced) e->workers[0].tr_end = now_ns();
  wait_workers(e, dg);
  task_release(&e->b);
  ph_mark(e, e->fused ? KT_PH_FUSED : KT_PH_MERGE);
  e->ph_tasks[e->fused ? 1 : 0]++;
  if (traced) trace_task(e, t);
}

// run_prefetch runs a prefetch task (kt_prefetch) on every worker, the
// queue thread as worker 0: each pool reads its slices of the listed
// experts. head is the task's queue position: a task queued behind it
// (qtail past head + 1) stops the reading.
static void run_prefetch(kt_engine* e, const kt_task* t, int head) {
  const kt_layer* l = t->l;
  // the owned path reads each gate/up block on the core that will take it
  // (one pool: only one-pool tasks run the fused path); otherwise each pool
  // reads its slices of the experts in chunks
  e->pf_own = e->cfg.owned && e->npools == 1;
  if (e->pf_own && e->cfg.miss_pf) {  // what a task of this layer finds in the caches (owned_setup)
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
  run_job(&e->workers[0]);
  wait_workers(e, dg);
  e->pfjob = 0;
}

// task_done counts a task out of pending and wakes the kt_sync callers
// that sleep for it. Every task, a prefetch task too: a caller that syncs
// on a lone prefetch sleeps once its spin runs out (a prefetch that outlasts
// it on a loaded machine), and would otherwise never wake.
static void task_done(kt_engine* e) {
  atomic_fetch_sub_explicit(&e->pending, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&e->nsyncw, memory_order_seq_cst) > 0) {
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cv_done);
    pthread_mutex_unlock(&e->mu);
  }
}

static void* queue_main(void* arg) {
  kt_engine* e = (kt_engine*)arg;
  worker_init(&e->workers[0]);
  for (;;) {
    // a task usually follows soon: spin a while before sleeping on the
    // condition (only pausing at first, as the workers do)
    int head = atomic_load_explicit(&e->qhead, memory_order_relaxed);  // only this thread writes it
    kt_spin sp = {0, 0, 0};
    while (atomic_load_explicit(&e->qtail, memory_order_relaxed) == head && !atomic_load(&e->quit))
      if (!spin_step(e, &sp)) break;
    if (atomic_load_explicit(&e->qtail, memory_order_relaxed) == head) {
      pthread_mutex_lock(&e->mu);
      e->qsleep = 1;
      while (atomic_load(&e->qtail) == head && !atomic_load(&e->quit)) pthread_cond_wait(&e->cv_task, &e->mu);
      e->qsleep = 0;
      pthread_mutex_unlock(&e->mu);
    }
    if (atomic_load_explicit(&e->qtail, memory_order_acquire) == head) {
      if (atomic_load(&e->quit)) break;  // quit is set with the queue drained
      continue;
    }
    kt_task t = e->q[head % QCAP];
    atomic_store_explicit(&e->qhead, head + 1, memory_order_release);  // the slot may be reused
    if (t.npf > 0) {
      run_prefetch(e, &t, head);
      task_done(e);
      continue;  // no trace
    }
    run_task(e, &t);
    if (e->trace) {
      int64_t tc = now_ns();
      if (e->tr_last) atomic_fetch_add_explicit(&e->tr[KT_TR_DONE_COMPL], tc - e->tr_pub, memory_order_relaxed);
      atomic_store_explicit(&e->tr_compl, tc, memory_order_relaxed);
    }
    task_done(e);
  }
  return NULL;
}

// ---------------------------------------------------------------- public API

// enqueue puts t at the queue's tail: 0, or -1 when the queue is full.
static int enqueue(kt_engine* e, const kt_task* t) {
  pthread_mutex_lock(&e->mu);  // among submitters
  int tail = atomic_load_explicit(&e->qtail, memory_order_relaxed);
  if (tail - atomic_load_explicit(&e->qhead, memory_order_acquire) >= QCAP) {
    pthread_mutex_unlock(&e->mu);
    return -1;
  }
  kt_task* q = &e->q[tail % QCAP];
  q->l = t->l;
  q->b = t->b;
  q->t_sub = t->t_sub;
  q->npf = t->npf;
  if (t->npf > 0) memcpy(q->pf, t->pf, sizeof(int32_t) * (size_t)t->npf);
  atomic_fetch_add_explicit(&e->pending, 1, memory_order_seq_cst);
  atomic_store_explicit(&e->qtail, tail + 1, memory_order_release);
  if (e->qsleep) pthread_cond_signal(&e->cv_task);
  pthread_mutex_unlock(&e->mu);
  return 0;
}

int kt_submit(kt_engine* e, const kt_layer* l, const kt_batch* b) {
  kt_task t;
  t.l = l;
  t.b = *b;
  t.t_sub = 0;
  t.npf = 0;
  if (e->trace) {
    t.t_sub = now_ns();
    int64_t r = atomic_exchange_explicit(&e->tr_ret, 0, memory_order_relaxed);
    if (r) {
      atomic_fetch_add_explicit(&e->tr[KT_TR_RET_SUB], t.t_sub - r, memory_order_relaxed);
      atomic_fetch_add_explicit(&e->tr[KT_TR_GAPS], 1, memory_order_relaxed);
    }
  }
  return enqueue(e, &t);
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
  return enqueue(e, &t);
}

// sync_traced records a kt_sync that waited: completion -> return.
static void sync_traced(kt_engine* e) {
  if (!e->trace) return;
  int64_t t = now_ns();
  atomic_fetch_add_explicit(&e->tr[KT_TR_COMPL_RET], t - atomic_load_explicit(&e->tr_compl, memory_order_relaxed),
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&e->tr[KT_TR_SYNCS], 1, memory_order_relaxed);
  atomic_store_explicit(&e->tr_ret, t, memory_order_relaxed);
}

void kt_sync(kt_engine* e, int allow_pending) {
  int waited = 0;
  // the caller waits for running work and has a core of its own: it spins
  // 5 ms longer than an idle thread (on the device, callers that slept after
  // 0.3 ms paid ~0.3 ms of wake-up on 0.4-0.7 ms one-token tasks)
  kt_spin sp = {0, 0, SYNC_SPIN_NS};
  for (;;) {
    if (atomic_load_explicit(&e->pending, memory_order_acquire) <= allow_pending) {  // the tasks' writes are visible
      if (waited) sync_traced(e);
      return;
    }
    waited = 1;
    if (!spin_step(e, &sp)) break;
  }
  if (e->trace) atomic_fetch_add_explicit(&e->tr[KT_TR_SYNC_SLEEPS], 1, memory_order_relaxed);
  pthread_mutex_lock(&e->mu);
  atomic_fetch_add_explicit(&e->nsyncw, 1, memory_order_seq_cst);
  while (atomic_load_explicit(&e->pending, memory_order_seq_cst) > allow_pending) pthread_cond_wait(&e->cv_done, &e->mu);
  atomic_fetch_sub_explicit(&e->nsyncw, 1, memory_order_seq_cst);
  pthread_mutex_unlock(&e->mu);
  sync_traced(e);
}

int kt_forward(kt_engine* e, const kt_layer* l, const kt_batch* b) {
  while (kt_submit(e, l, b) != 0) kt_sync(e, 0);
  kt_sync(e, 0);
  return e->err;  // visible: kt_sync saw pending drop (acquire)
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
      kt_free(w->s.pack, e->packbytes);
      kt_free(w->s.pack2, e->packbytes);
      free(w->s.ci);
      free(w->s.row);
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

void kt_engine_prefetched(kt_engine* e, int64_t* planned, int64_t* read) {
  *planned = atomic_load_explicit(&e->pf_planned, memory_order_relaxed);
  *read = atomic_load_explicit(&e->pf_read, memory_order_relaxed);
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
      w->s.amx_var = cfg->amx_var;
      w->s.i4_kch = cfg->amx_i4_kch;
      w->s.i4_pf = cfg->amx_i4_pf;
      w->s.i4g_pf = cfg->amx_i4g_pf;
      w->s.i4f_pf = cfg->amx_i4f_pf;
      w->s.i4_fuse = cfg->amx_i4_fuse;
      w->s.i4_fuse1 = cfg->amx_i4_fuse1;
      w->s.dec_pf = cfg->dec_pf;
      w->parts = (const void**)xalloc(sizeof(void*) * (size_t)(cfg->max_k * e->npools));
      w->pw = (float*)xalloc(sizeof(float) * (size_t)(cfg->max_k * e->npools));
      if (!w->s.pack || !w->s.pack2 || !w->s.ci || !w->s.row || !w->cg || !w->cu || !w->cd || !w->park || !w->trow || !w->xa || !w->xas || !w->parts || !w->pw)
        FAIL("out of memory for thread scratch");
    }
  if (cfg->cpus)
    for (int g = 0; g < e->nthreads && g < cfg->ncpus; g++) e->workers[g].cpu = cfg->cpus[g];
  for (int g = 1; g < e->nthreads; g++) {
    if (pthread_create(&e->workers[g].th, NULL, worker_main, &e->workers[g]) != 0)
      FAIL("cannot start worker thread %d: %s", g, strerror(errno));
    e->workers[g].started = 1;
  }
  if (pthread_create(&e->qthread, NULL, queue_main, e) != 0) FAIL("cannot start the queue thread");
  e->qstarted = 1;
  while (atomic_load(&e->ready) < e->nthreads) usleep(100);
  if (atomic_load(&e->amx_failed)) e->isa &= ~KT_ISA_AMX;  // fall back to AVX-512 rather than fault
  return e;
#undef FAIL
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
