// kt_engine.h: the engine's state and the functions its files share
// (engine_pool.c, engine_queue.c, engine_phases.c, engine_decode.c,
// engine_prefetch.c). Only those files include it; each defines _GNU_SOURCE
// before it (cpu_set_t, pthread_setaffinity_np).
#ifndef KT_ENGINE_H
#define KT_ENGINE_H

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
// (on the AMX machine, --amx-min-tokens 4 against 8 at 64-256 tokens,
// alternated twice, faster in 11 of 12 pairs; INT4_KGROUP mixed, stays 8)
#define AMX_MIN_M_I4 4
#define RMPF_MIN_M 8
// default kt_engine_config.amx_nxl by activation format: bf16 prefill calls
// prefetch 4 lines of the next call's weights per tile step (on the AMX
// machine, Qwen3-30B AMXBF16 at 4096 tokens faster than none in 4 of 4
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
  // order (oitems[ooff[w] .. ooff[w]+ocnt[w]), set by kt_owned_setup) and the
  // cursor its owner, then thieves, take them by (one line pair each)
  int owned;  // the current fused task takes owned items (kt_owned_setup)
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
  int pfjob;    // the job is a prefetch task's (kt_run_prefetch)
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
  int ybf16;     // the slot outputs Y are bf16 (kt_down_block, kt_merge_token)
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

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

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

// spin_pause is one step of a short wait for another worker's item.
static inline void spin_pause(int* spins) {
  if ((++*spins & 255) == 0)
    sched_yield();  // an oversubscribed machine: let the thread we wait for run
  else
    _mm_pause();
}

// ph_mark ends phase ph at the current time (queue thread only).
static inline void ph_mark(kt_engine* e, int ph) {
  int64_t t = now_ns();
  e->ph_ns[ph] += t - e->ph_t;
  e->ph_t = t;
}

static inline int64_t act_size(int act) { return act == KT_ACT_F32 ? 4 : act == KT_ACT_BF16 ? 2 : 1; }

// CONV_ISA calls the conversion fn (convert.h) of the engine's vector width.
#define CONV_ISA(fn, ...)           \
  do {                              \
    if (e->isa & KT_ISA_AVX512)     \
      kt_avx512_##fn(__VA_ARGS__);  \
    else                            \
      kt_avx2_##fn(__VA_ARGS__);    \
  } while (0)
#define ROW_TO_ACT(...) CONV_ISA(row_to_act, __VA_ARGS__)

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

// KT_MCH_BF16 and KT_MCH_S8 are the prefill tokens per kernel call when
// the configuration leaves it to the format. Measured on the 16-core AMX
// machine: bf16 kernel calls over 128 tokens beat 256 alone (BenchmarkAMXKernel,
// K 2048: 128 x 4 KiB of activations leave L2 room for the streamed weights);
// int8 layers ran 15-19% faster with 512-token calls than with 128 (six of
// six alternated pairs, Qwen3-30B at 4096 tokens).
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

// KT_SLAB is the default activation bytes of one gate/up kernel call (cfg.amx_slab)
// above which gate_up_rows runs K in slabs: Qwen3-30B's int8 calls (512 rows of
// K 2048, 1 MiB) stay whole; DeepSeek-V3's (K 7168: 128 bf16 rows, 1.8 MiB, or
// 512 int8 rows, 3.5 MiB) did not stay in L2 with the streamed weights, and
// gate/up ran at half the tile probe's rate there.
// KT_PARK is each worker's room for the parked sums of a group of row blocks.
#define KT_SLAB (1 << 20)
#define KT_PARK (512 << 10)

// MISS_RNG is how many byte ranges miss_ranges lists per gate/up item:
// the gate and up blocks' weights, scales and corrections.
#define MISS_RNG 6

// block_owner is the worker (of T) that owns row block blk of expert x's
// nb (cfg.owned): (x*nb + blk) % T, which depends on the expert's id only,
// so that a prefetch task of the predicted experts reads each block on the
// core that will compute it.
static inline int block_owner(int x, int blk, int nb, int T) { return (int)(((int64_t)x * nb + blk) % T); }

// owned_block is the first row block of expert x that worker me owns (then
// every T-th).
static inline int owned_block(int x, int nb, int T, int me) { return ((me - block_owner(x, 0, nb, T)) % T + T) % T; }

// fused_fits reports whether the task's (token, expert) pairs fit the fused
// path's limit; it takes the task when some expert is active too.
static inline int fused_fits(const kt_engine* e) {
  return e->npools == 1 && e->fused_max > 0 && (int64_t)e->ntok * e->b.k <= e->fused_max;
}

// task_release stores the batch's release value (kt_batch.release) once
// the task's outputs are complete or it failed: the first thing after its
// end, so that a GPU stream waiting on the word goes on without waiting for
// the completion, the caller's sync and its own store.
static inline void task_release(const kt_batch* b) {
  if (b->release) atomic_store_explicit((_Atomic uint32_t*)b->release, b->release_value, memory_order_release);
}

// engine_pool.c
void kt_wake(_Atomic int* nsleep, _Atomic int* addr);
void kt_wait_change(kt_engine* e, _Atomic int* addr, int old);
void kt_barrier(kt_engine* e, _Atomic int* cnt, _Atomic int* gen, int n);
void kt_worker_init(kt_worker* w);

// engine_queue.c
void* kt_queue_main(void* arg);
int kt_enqueue(kt_engine* e, const kt_task* t);
void kt_wait_workers(kt_engine* e, int dg);

// engine_phases.c
int kt_is_amx_kernel(kt_kernel k);
int kt_item_block(const kt_engine* e, int n, int rmax, int64_t want);
void kt_put_act_row(kt_engine* e, kt_worker* w, const void* src, int src_bf16, int n, int act, char* buf, int64_t s,
                    float* scale, int tiled);
void kt_gate_up_block(kt_engine* e, kt_worker* w, kt_pool* P, const kt_expert* xe, int x, int n0, int H, int I,
                      int64_t asz, int more);
void kt_down_block(kt_engine* e, kt_worker* w, kt_pool* P, const kt_expert* xe, int x, int h0, int r4, int H, int I,
                   int64_t asz);
void kt_merge_token(kt_engine* e, kt_worker* w, int t, int h0, int n, int H);
void kt_run_job(kt_worker* w);

// engine_decode.c
void kt_owned_setup(kt_engine* e);
void kt_run_job_fused(kt_worker* w);

// engine_prefetch.c
int64_t kt_pf_block(int fmt, const kt_mat* W, int n0, kt_pfreg* r, kt_pfreg* s, kt_pfreg* c);
void kt_run_prefetch_job(kt_worker* w);
void kt_run_prefetch(kt_engine* e, const kt_task* t, int head);

// publish_job starts the workers on the job set up so far.
static inline void publish_job(kt_engine* e) {
  atomic_fetch_add_explicit(&e->job_gen, 1, memory_order_seq_cst);
  kt_wake(&e->nsleep, &e->job_gen);
}

#endif
