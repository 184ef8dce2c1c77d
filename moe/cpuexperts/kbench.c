// kbench.c: a micro-benchmark of the AMX prefill kernels alone, for tuning
// their loop structure on the device (BenchmarkAMXKernel): every thread,
// pinned to its own core, streams through a private weight region in
// 32-row calls over one expert's activations, as gate/up and down do.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kt_internal.h"

void* kt_alloc(int64_t bytes, int node);
void kt_amx_peak_loop(int i8, int loads, int64_t iters, const char* buf);
float kt_amx_mix_loop(int i8, int amx, int avx, int64_t iters, const char* buf);
int kt_amx_peak_rows(int i8, int rows, int64_t iters, const char* buf);

// kb_mix_avx gives the vector tokens per round of the mixed peak variants:
// -3 tile block (L1 reloads) + 8 tokens of AVX-512 dot products, -4 the 8
// tokens alone, -5 tile block + 4 tokens; 0 for the other variants.
static int kb_mix_avx(int var) { return var == -3 || var == -4 ? 8 : var == -5 ? 4 : 0; }

// kt_amx_peak_flops is the work of one peak round of variant var (< 0);
// m is the A and C tiles' rows of variant -6 (16 for the others).
static double kt_amx_peak_flops(int i8, int var, int m) {
  double amx = var == -4 ? 0 : 4.0 * 2 * (var == -6 ? m : 16) * 16 * (i8 ? 64 : 32);
  double avx = (double)kb_mix_avx(var) * 2 * 16 * 2 * 16 * (i8 ? 4 : 2);  // tokens x 2 tiles x 16 rows x lanes x MACs
  return amx + avx;
}

// KB_PEAK_ROUNDS is the number of 2x2 tile-product rounds per rep of the
// peak variants (var < 0).
#define KB_PEAK_ROUNDS 100000
void kt_free(void* p, int64_t bytes);

typedef struct {
  int fmt, m, k, kch, pf, pfm, nxl, var, i4pf, i4fuse, reps, cpu, nthreads, noamx;
  int64_t wbytes;
  _Atomic int* ready;
  double secs;
  int err;
  float sink;  // the mixed variants' vector result (kept so it is computed)
} kb_arg;

// KB_GROUP is the group of the KT_FMT_I4G_PK weights the benchmark runs.
#define KB_GROUP 128

static double kb_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void* kb_thread(void* p) {
  kb_arg* a = (kb_arg*)p;
  if (a->cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  int i8 = a->fmt != KT_FMT_BF16_PK;  // integer weights, int8 activations
  int i4 = a->fmt == KT_FMT_I4_PK || a->fmt == KT_FMT_I4G_PK;
  int k = a->k, m = a->m, mp = (m + 31) / 32 * 32;
  // activations: bf16 for the AMX kernel, f32 for the AVX-512 bf16 kernel
  // the harness test runs instead (it reads m rows of k floats)
  int64_t xesz = i8 ? 1 : (a->noamx ? 4 : 2);
  int64_t pairb = 2 * panel_bytes(a->fmt, k);  // one 32-row call
  int64_t npairs = a->wbytes / pairb;
  if (npairs < 1) npairs = 1;
  int64_t wb = npairs * pairb;
  // scales and corrections: one per row, or per row and group
  int64_t nsc = npairs * KT_NB * (a->fmt == KT_FMT_I4G_PK ? k / KB_GROUP : 1);
  char* w = kt_alloc(wb, -1);
  char* x = kt_alloc(mp * k * xesz, -1);
  float* sc = malloc(sizeof(float) * (size_t)nsc);
  uint16_t* gsc = malloc(sizeof(uint16_t) * (size_t)nsc);  // group-wise panels' bf16 scales
  int32_t* corr = calloc((size_t)nsc, sizeof(int32_t));  // the VNNI kernels' u8 correction
  float* as = malloc(sizeof(float) * (size_t)mp);
  float* C = kt_alloc((int64_t)mp * KT_NB * 4, -1);
  int32_t* ci = kt_alloc((int64_t)KT_MCH * KT_NB * 4, -1);
  char* pack = i4 ? kt_alloc((int64_t)KT_NB * k, -1) : NULL;  // the int4 kernels' unpacked panels
  int32_t* gsum = malloc(sizeof(int32_t) * KT_GSUM_TOK * (size_t)(k / 32 + 1));  // the group-wise kernels' sums
  int ok = w && x && sc && gsc && corr && gsum && as && C && ci && (!i4 || pack) && (a->noamx || kt_amx_init_thread() == 0);
  if (ok) {
    // small values: no overflow, no denormals (bf16 0.0078 / int8 0..63 / int4 nibbles 0..7)
    for (int64_t i = 0; i < wb; i++)
      w[i] = i4 ? (char)((i * 7) & 0x77) : i8 ? (char)((i * 7) & 63) : (char)((i & 1) ? 0x3c : 0x00);
    for (int64_t i = 0; i < mp * k * xesz; i++) x[i] = i8 ? (char)((i * 5) & 63) : (char)((i & 1) ? 0x3c : 0x00);
    for (int64_t i = 0; i < nsc; i++) {  // group scales that differ
      sc[i] = (float)(1 + (i & 3)) / 4;
      gsc[i] = kt_f2bf(sc[i]);
    }
    for (int i = 0; i < mp; i++) as[i] = 1;
  }
  kt_scratch s;
  memset(&s, 0, sizeof s);
  s.ci = ci;
  s.amx_kch = a->kch;
  s.amx_pf = a->pf;
  s.amx_pfm = a->pfm > 0 ? a->pfm : 3;
  s.amx_nxl = a->nxl;
  s.pack = pack;
  s.gsum = gsum;
  s.i4_pf = s.i4g_pf = s.i4f_pf = a->i4pf;
  s.dec_pf = a->noamx ? a->i4pf : 0;  // the decode kernels' panel prefetch (noamx)
  s.i4_fuse = a->i4fuse ? KT_MCH : 0;
  kt_mat W;
  memset(&W, 0, sizeof W);
  W.w = (const uint8_t*)w;
  W.scale = a->fmt == KT_FMT_I4G_PK ? NULL : sc;
  W.gscale = a->fmt == KT_FMT_I4G_PK ? gsc : NULL;
  W.corr = a->fmt == KT_FMT_I4G_PK ? NULL : corr;
  W.n = (int)(npairs * KT_NB);
  W.k = k;
  W.group = a->fmt == KT_FMT_I4G_PK ? KB_GROUP : 0;
  kt_act A = {x, k, as, 1};
  // the AMX prefill kernel, or (noamx: the harness alone, on any AVX-512 CPU)
  // the VNNI decode kernel of the same weights (bf16: the f32-activation one)
  kt_kernel kern = a->noamx ? kt_pick_kernel(a->fmt, KT_ISA_AVX512, KT_ISA_AVX512 | KT_ISA_VNNI)
                            : kt_pick_kernel(a->fmt, KT_ISA_AMX, KT_ISA_AMX);
  // start together (a thread that failed still counts itself in)
  atomic_fetch_add(a->ready, 1);
  while (atomic_load(a->ready) < a->nthreads) sched_yield();
  double t0 = kb_now();
  if (a->var < 0 && ok && !a->noamx) {  // the tile unit alone: -1 resident operands, -2 operands from L1
    char pbuf[4096] __attribute__((aligned(64)));  // small values: bf16 0.0078, int8 1
    for (int i = 0; i < 4096; i++) pbuf[i] = i8 ? 1 : ((i & 1) ? 0x3c : 0x00);
    if (a->var == -6)  // -2 with A and C tiles of m rows
      ok = kt_amx_peak_rows(i8, a->m, (int64_t)a->reps * KB_PEAK_ROUNDS, pbuf) == 0;
    else if (a->var >= -2)
      kt_amx_peak_loop(i8, a->var == -2, (int64_t)a->reps * KB_PEAK_ROUNDS, pbuf);
    else  // -3..-5: tile block and vector dot products in one stream (kb_mix_avx)
      a->sink = kt_amx_mix_loop(i8, a->var != -4, kb_mix_avx(a->var), (int64_t)a->reps * KB_PEAK_ROUNDS, pbuf);
    a->reps = 0;
  }
  for (int r = 0; ok && r < a->reps; r++)
    for (int64_t q = 0; q < npairs; q++) {
      s.nx = q + 1 < npairs ? w + (q + 1) * pairb : NULL;
      s.nxb = pairb;
      kern(&W, (int)(q * KT_NB), KT_NB, &A, m, C, KT_NB, &s);
    }
  a->secs = kb_now() - t0;
  a->err = !ok;
  kt_free(w, wb);
  kt_free(x, mp * k * xesz);
  free(sc);
  free(gsc);
  free(corr);
  free(gsum);
  free(as);
  kt_free(C, (int64_t)mp * KT_NB * 4);
  kt_free(ci, (int64_t)KT_MCH * KT_NB * 4);
  if (pack) kt_free(pack, (int64_t)KT_NB * k);
  return NULL;
}

// kt_amx_kbench runs the AMX kernel of fmt (KT_FMT_BF16_PK, KT_FMT_I8_PK,
// KT_FMT_I4_PK, KT_FMT_I4G_PK with groups of 128) on nthreads threads
// (pinned to cpus[i]), each over its own wbytes of weights, reps times, with
// m tokens of k columns and the given knobs (i4pf: the int4 unpack's
// prefetch distance; i4fuse: the unpack inside the tile loop). It returns
// the slowest thread's seconds and the flops done in *flops, or -1 (no AMX, no memory, bad arguments). noamx runs the AVX-512 kernels of the
// same formats instead (the decode kernels: a test of the harness on CPUs
// without AMX, or the vector side of a comparison), i4pf then being their
// panel prefetch distance (Config.DecodePrefetch).
double kt_amx_kbench(int fmt, int m, int k, int kch, int pf, int pfm, int nxl, int var, int i4pf, int i4fuse, int reps,
                     int64_t wbytes, int nthreads, const int* cpus, int noamx, double* flops) {
  int i4 = fmt == KT_FMT_I4_PK || fmt == KT_FMT_I4G_PK;
  if ((fmt != KT_FMT_BF16_PK && fmt != KT_FMT_I8_PK && !i4) || m < 1 || m > KT_MCH || k < 64 || k % (i4 ? 128 : 64) ||
      nthreads < 1 || nthreads > 1024 || reps < 1 || (i4 && var < 0))
    return -1;
  kb_arg* args = calloc((size_t)nthreads, sizeof(kb_arg));
  pthread_t* th = calloc((size_t)nthreads, sizeof(pthread_t));
  _Atomic int ready = 0;
  if (!args || !th) {
    free(args);
    free(th);
    return -1;
  }
  int bad = 0;
  for (int i = 0; i < nthreads; i++) {
    args[i] = (kb_arg){fmt, m, k, kch, pf, pfm, nxl, var, i4pf, i4fuse, reps, cpus ? cpus[i] : -1, nthreads, noamx, wbytes, &ready, 0, 0};
    if (pthread_create(&th[i], NULL, kb_thread, &args[i]) != 0) {
      args[i].cpu = -2;  // not started
      bad = 1;
      atomic_fetch_add(&ready, 1);
    }
  }
  double worst = 0;
  for (int i = 0; i < nthreads; i++) {
    if (args[i].cpu == -2) continue;
    pthread_join(th[i], NULL);
    if (args[i].err) bad = 1;
    if (args[i].secs > worst) worst = args[i].secs;
  }
  int64_t npairs = wbytes / (2 * panel_bytes(fmt, k));
  if (npairs < 1) npairs = 1;
  *flops = 2.0 * m * KT_NB * (double)k * (double)npairs * reps * nthreads;
  if (var < 0 && !noamx)  // four 16x16 tile products per round, K 32 (bf16) or 64 (int8), plus the vector share
    *flops = kt_amx_peak_flops(fmt == KT_FMT_I8_PK, var, m) * (double)KB_PEAK_ROUNDS * reps * nthreads;
  free(args);
  free(th);
  return bad ? -1 : worst;
}
