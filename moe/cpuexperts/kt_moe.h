// kt_moe.h: the C side of kt's CPU expert engine.
//
// Everything on the hot path lives here: the worker pools (pthreads, pinned,
// one pool per NUMA node), the FIFO task queue, the routing of a batch to
// experts and the SIMD kernels. Go only creates, configures and destroys
// these objects. kt_submit / kt_sync may be called from any thread and never
// allocate.
#ifndef KT_MOE_H
#define KT_MOE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ISA capability bits, decided by the Go side from CPUID and passed in.
enum {
  KT_ISA_AVX2 = 1 << 0,      // avx2 + fma + f16c
  KT_ISA_AVX512 = 1 << 1,    // avx512 f/bw/vl/dq
  KT_ISA_VNNI = 1 << 2,      // avx512_vnni
  KT_ISA_AVX512BF16 = 1 << 3,// avx512_bf16
  KT_ISA_AMX = 1 << 4,       // amx tile + int8 + bf16, permission granted
  // Tests only, with KT_ISA_AMX (and the AVX-512, VNNI and BF16 bits every
  // AMX CPU has): the AMX prefill kernels run over a scalar emulation of the
  // tile registers (kern_amx_emu.c) and no thread loads a tile configuration,
  // so the engine's AMX path runs on CPUs without AMX. Go sets it only from
  // the unexported Config.amxEmu.
  KT_ISA_AMX_EMU = 1 << 5,
};

// Weight storage formats of one projection matrix (rows N x cols K).
enum {
  KT_FMT_BF16_RM = 1,  // HF bf16 row-major, used in place (row stride ld)
  KT_FMT_FP8_RM = 2,   // HF fp8 e4m3 row-major + f32 128x128 block scales (weight_scale_inv)
  KT_FMT_BF16_PK = 3,  // panels of 16 rows, 64-byte lines of k-pairs (AMX B-tile layout)
  KT_FMT_I8_PK = 4,    // panels of 16 rows, lines of k-quads, per-row scale
  KT_FMT_I4_PK = 5,    // int4 nibbles (q*16 as int8 after unpack), per-row scale amax/112
  KT_FMT_I4G_PK = 6,   // int4 codes (value + 8, unsigned nibbles), a bf16 scale / 16 per (row, k-group)
};

// One projection (of one expert, one pool's slice).
typedef struct {
  const uint8_t* w;     // weight bytes
  const float* scale;   // per row [N]; fp8: block grid; NULL for group-wise
  const uint16_t* gscale; // KT_FMT_I4G_PK: bf16 scales per 16 v, [N/16][K/G][16]
  const int32_t* corr;  // 128 x the row's sum of its int8 values (int4: q*16) for the u8 activations; NULL for group-wise
  int64_t ld;           // row-major formats: row stride in elements
  int n, k;             // rows, columns
  int group;            // KT_FMT_I4G_PK group size (32, 64 or 128)
  int row0, col0;       // fp8: offset of this slice in the full matrix (for block scales)
  int64_t sld;          // fp8: stride of the scale grid (blocks per row of blocks)
} kt_mat;

// Projection of one expert for one pool.
typedef struct {
  kt_mat gate, up, down;
} kt_expert;

// Expert LoRA of one layer (kern_lora.c), f32 factors stacked per expert in
// KT's fused shapes: ga, ua [E][r][H]; gb, ub [E][I][r]; da [E][r][I]; db [E][H][r]
// (full I; pool p works on rows/columns [row0[p], row0[p] + inter_p[p])).
// g = W_g x + s·B_g(A_g x), u likewise, h = silu(g)·u, y = W_d h + s·B_d(A_d h).
typedef struct kt_lora {
  int r;
  float s;
  int isa;            // the engine's ISA bits: KT_ISA_AVX512 selects the AVX-512 dot products
  int hidden, inter;  // H and the full I
  const float *ga, *gb, *ua, *ub, *da, *db;
  int row0[8];
  // per-task scratch, shared by the layers of one engine (tasks run one at a time)
  float* ax[8];  // per pool [max_slots][2r]: A_g x, A_u x of each slot
  float* ad[8];  // per pool [max_slots][r]: A_d h of each slot (this pool's h slice)
  int* st[8];    // per pool [nexp][2]: 0 = to do, 1 = being computed, 2 = ready (ax, ad)
} kt_lora;

// A layer: routed experts of one MoE layer, split across the pools.
typedef struct kt_layer {
  int fmt;                 // KT_FMT_*
  int nexp, hidden, inter; // inter = full intermediate size
  int npools;
  int inter_p[8];          // intermediate rows of pool p
  kt_expert* ex;           // [npools][nexp]
  const uint8_t* skip;     // [nexp], nonzero = skip (GPU expert); may be NULL; read at run time
  const kt_lora* lora;     // expert LoRA, NULL = none
} kt_layer;

// One batch. Pointers must stay valid until the task has been synced.
typedef struct {
  int32_t ntok;            // tokens
  int32_t k;               // ids per token
  const void* x;           // [ntok][hidden], bf16 if x_bf16 else f32
  const int32_t* ids;      // [ntok][k], <0 or >= nexp: skipped
  const float* wts;        // [ntok][k]
  void* out;               // [ntok][hidden], bf16 if out_bf16 else f32
  int32_t x_bf16, out_bf16;
  int32_t incremental;     // add onto out instead of overwriting it
  uint32_t* release;       // kt_submit: if set, release_value is stored here (release order) as soon as the
  uint32_t release_value;  // task ends, failed or not: a GPU stream waiting on the word goes on at once
} kt_batch;

typedef struct kt_engine kt_engine;

typedef struct {
  int npools;
  int threads[8];   // worker threads per pool
  int node[8];      // NUMA node of each pool, -1 = do not bind
  const int* cpus;  // the CPU of each thread in pool order (NULL = unpinned)
  int ncpus;
  int isa;          // KT_ISA_* bits allowed
  int max_tokens, max_k, nexp, hidden, inter_p; // scratch sizing (inter_p = largest pool slice)
  int fused_max_slots; // one pool: tasks with at most this many (token, expert) pairs take the
                       // barrier-free decode path; 0 = default (512), < 0 = never
  int amx_kch;         // AMX prefill K block in 1 KiB tile steps; <= 0 = the whole K in one pass
  int amx_kch_down;    // the down projection's AMX prefill K block; <= 0 = the whole K in one pass
  int amx_pf;          // AMX prefill: prefetch tiles this many steps ahead; <= 0 = none
  int amx_pfm;         // AMX prefill: tiles amx_pf prefetches, bit 0 = A, bit 1 = B; 0 = both
  int amx_t1;          // AMX prefill: tile loads with the T1 hint (tileloaddt1), bit 0 = A, bit 1 = B; 0 = default, -1 = none
  int amx_nxl;         // AMX prefill: most lines of the next call's weights prefetched into L2
                       // per tile step; 0 = default, < 0 = none
  int dec_pf;          // one-token decode: prefetch this many bytes ahead; <= 0 = none
  int mch;             // prefill tokens per kernel call (rounded up to 32, at most 512); <= 0 = by activation format (kt_engine.h prefill_chunk)
  int64_t amx_slab;    // AMX prefill gate/up: activation bytes of one kernel call above which K runs in slabs
                       // of at most half this (engine_phases.c gate_up_rows); 0 = default (1 MiB), < 0 = never
  int amx_slab_grp;    // ... row blocks of 32 per slab group; <= 0 = as many as KT_PARK holds the sums of
  int amx_min_m;       // fewest tokens of an expert that take the AMX prefill kernels; <= 0 = AMX_MIN_M
  int amx_i4_kch;      // AMX int4 prefill: int8 tile steps unpacked and run at a time; <= 0 = the whole K
  int amx_i4_pf;       // AMX int4 prefill: the unpack prefetches its per-row int4 panels this many bytes ahead; <= 0 = none
  int amx_i4g_pf;      // ... its group-wise int4 panels
  int amx_i4f_pf;      // ... the fused unpack's (amx_i4_fuse), both formats
  int amx_i4_fuse;     // AMX int4 prefill: calls of at most this many tokens fuse the unpack into the tile loop (0: none)
  int amx_i4_fuse1;    // ... longer calls fuse it with their first 32 tokens: bit 0 AMXINT4, bit 1 INT4_KGROUP (else unpack first)
  int trace;           // time every fused task per thread (kt_engine_trace)
  int test_route_delay_us; // tests: an early-started task is routed this long after its workers start
  int64_t spin_ns;     // engine threads and kt_sync spin this long (ns) before sleeping; 0 = default, < 0 = no spin
  int y_f32;           // keep the per-slot down outputs in f32 (default: bf16 for bf16 and int8 activations)
  int h_f32;           // int8 activations: keep h in f32 until quantized (default: bf16)
  int y_cached;        // phased path: store the per-slot down outputs through the caches (default: around them)
  int out_cached;      // phased path: store the weighted sums (the task's output) through the caches (default: around them)
  int owned;           // one-token decode: each worker first takes the gate/up blocks it owns, which a
                       // prefetch task reads on that worker (default: blocks in counter order)
  int miss_pf;         // owned one-token decode: each worker runs its blocks of the prefetched experts first,
                       // its kernels prefetching its others (kt_side_pf) (default: expert order, no side stream)
} kt_engine_config;

// kt_engine_new creates the engine; on failure it returns NULL and writes a
// message into err (errlen bytes).
kt_engine* kt_engine_new(const kt_engine_config* cfg, char* err, int errlen);
void kt_engine_free(kt_engine* e);
// kt_engine_isa returns the ISA bits in use (AMX is dropped if a thread could
// not configure its tiles).
int kt_engine_isa(const kt_engine* e);

// Phases of the barrier-phased task path, timed on the queue thread.
enum {
  KT_PH_ROUTE,    // routing and setup before the workers start
  KT_PH_CONVERT,  // 1a: each token's row to the activation format
  KT_PH_GATHER,   // 1b: rows into per-expert slot order
  KT_PH_GATEUP,   // 2: gate/up + SiLU
  KT_PH_QUANT,    // 3: h to the down projection's activation format
  KT_PH_DOWN,     // 4: down projection
  KT_PH_MERGE,    // 5: weighted sum per token, until every thread is done
  KT_PH_FUSED,    // a whole task on the fused (decode) path
  KT_NPHASES
};
// kt_engine_phases copies the accumulated nanoseconds per phase into ns
// (KT_NPHASES values) and the number of phased and fused tasks into tasks[2],
// then resets them. Call it between tasks (after kt_sync).
void kt_engine_phases(kt_engine* e, int64_t* ns, int64_t* tasks);

// Per-thread timing of fused (decode) tasks (kt_engine_config.trace), in
// nanoseconds summed over the traced tasks. "pub" is the moment the task's
// job was published to the workers (after routing); worker times are from
// it.
enum {
  KT_TR_TASKS,       // traced tasks
  KT_TR_SUB_PICK,    // kt_submit -> the queue thread took the task
  KT_TR_PICK_PUB,    // taken -> published (routing, setup)
  KT_TR_SEEN_AVG,    // pub -> a worker starts on it (mean over the workers)
  KT_TR_SEEN_MAX,    // ... the last worker to start
  KT_TR_GU_MAX,      // pub -> the last gate/up item done
  KT_TR_GU_WORK,     // time inside gate/up blocks (kernels, SiLU, h store; mean over the workers)
  KT_TR_DN_WORK,     // time inside down blocks (kernels, slot outputs; mean over the workers)
  KT_TR_END_MIN,     // pub -> the first worker out of items
  KT_TR_END_AVG,     // ... mean over the workers
  KT_TR_END_MAX,     // ... the last worker done (the task's work is done)
  KT_TR_ALLDONE,     // pub -> the runner saw every worker done
  KT_TR_DONE_COMPL,  // all done -> completion published (pending decremented)
  KT_TR_COMPL_RET,   // completion -> kt_sync returned (summed over the syncs that waited)
  KT_TR_RET_SUB,     // kt_sync returned -> the next kt_submit (the caller's own time)
  KT_TR_SYNCS,       // kt_sync calls counted in COMPL_RET
  KT_TR_GAPS,        // gaps counted in RET_SUB
  KT_TR_ITEMS_MIN,   // fewest items of one worker in a task
  KT_TR_ITEMS_MAX,   // most items of one worker in a task
  KT_TR_SLEEPS,      // waits of engine threads that ended in a futex sleep (not only in traced tasks)
  KT_TR_SYNC_SLEEPS, // kt_sync calls that slept
  KT_TR_N
};
// kt_engine_trace copies the sums (KT_TR_N values) and, per worker thread,
// the summed pub -> done and pub -> start times into wend and wseen
// (nthreads values each, may be NULL), then resets them. Call it between
// tasks (after kt_sync).
void kt_engine_trace(kt_engine* e, int64_t* sums, int64_t* wend, int64_t* wseen);
int kt_engine_threads(const kt_engine* e);

// kt_check_tile_layout checks that activation rows stored for the AMX
// kernels (row-major and in tile order) are read back by the kernels' tile
// addressing, for rows of rb bytes (a multiple of 64); 0 = consistent (tests).
int kt_check_tile_layout(int rows, int rb);

// kt_submit queues forward(layer, batch); the batch struct is copied. It
// returns 0, or -1 when the queue is full.
int kt_submit(kt_engine* e, const kt_layer* l, const kt_batch* b);
// kt_sync blocks until at most allow_pending submitted tasks are unfinished.
void kt_sync(kt_engine* e, int allow_pending);
// kt_prefetch queues a task that reads the weights (and scales) of experts
// of layer l into the workers' caches: ids[0..n) in the order given (the most
// likely first), leaving out ids < 0 or >= nexp, repeats, experts in the
// layer's skip mask, and any past the first KT_PF_MAX. It stops reading as
// soon as another task is queued behind it, so a forward task of the same
// experts submitted next waits a few microseconds at most and then finds
// what was read in the caches. For the idle time between two layers' tasks
// (the hybrid step reads the experts the next layer's router is predicted to
// pick while the GPU runs that layer's attention). Returns 0, or -1 when
// the queue is full. The ids are copied.
#define KT_PF_MAX 64
int kt_prefetch(kt_engine* e, const kt_layer* l, const int32_t* ids, int n);
// kt_engine_prefetched returns the bytes the prefetch tasks so far were to
// read and the bytes they read before a task queued behind stopped them
// (read them between tasks, after kt_sync).
void kt_engine_prefetched(kt_engine* e, int64_t* planned, int64_t* read);
// kt_forward is kt_submit then kt_sync(e, 0) in one call, retrying while the
// queue is full; the batch's memory need only stay valid during the call.
// It returns nonzero when a task recorded an error (kt_take_error).
int kt_forward(kt_engine* e, const kt_layer* l, const kt_batch* b);
// kt_take_error returns and clears the first error a task recorded (0 = none)
// and copies its message.
int kt_take_error(kt_engine* e, char* msg, int msglen);

// Packing / quantization helpers (portable C, run once at load).
// Each packs rows [0,n) x cols [0,k) of a source given as f32 rows with stride ld.
void kt_pack_bf16(const float* src, int64_t ld, int n, int k, uint16_t* dst);
void kt_pack_i8(const float* src, int64_t ld, int n, int k, int8_t* dst, float* scale, int32_t* corr);
void kt_pack_i4(const float* src, int64_t ld, int n, int k, uint8_t* dst, float* scale, int32_t* corr);
void kt_pack_i4g(const float* src, int64_t ld, int n, int k, int group, uint8_t* dst, uint16_t* scale);
// kt_pack_i4g_codes packs compressed-tensors INT4 codes (int32 words of eight
// nibbles, wld words per row; scales sld per row) as they are.
void kt_pack_i4g_codes(const uint32_t* words, int64_t wld, const float* gscale, int64_t sld, int n, int k, int group,
                       uint8_t* dst, uint16_t* scale);
// Row-major quantization (the on-disk layout of kt quant) and packing of it.
void kt_quant_rows_i8(const float* src, int64_t ld, int n, int k, int8_t* q, float* scale);
void kt_quant_rows_i4(const float* src, int64_t ld, int n, int k, uint8_t* q, float* scale);
void kt_pack_q8_rows(const int8_t* q, int n, int k, int8_t* dst, float scale_mul, const float* scale_in, float* scale, int32_t* corr);
void kt_pack_q4_rows(const uint8_t* q, int n, int k, uint8_t* dst, const float* scale_in, float* scale, int32_t* corr);

// Widen helpers used by loaders and the reference.
void kt_bf16_to_f32(const uint16_t* src, int64_t n, float* dst);
void kt_fp8_to_f32(const uint8_t* src, int64_t n, float* dst);

// Memory helpers: 64-byte aligned, optionally bound to a NUMA node.
void* kt_alloc(int64_t bytes, int node);
void kt_free(void* p, int64_t bytes);

// kt_stream_read reads buf (bytes) with nthreads threads, reps times, and
// returns the seconds taken; the memory-bandwidth probe of kt bench.
double kt_stream_read(const void* buf, int64_t bytes, int nthreads, int reps, int isa);

#ifdef __cplusplus
}
#endif
#endif
