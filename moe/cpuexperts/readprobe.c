// readprobe.c: the memory read-bandwidth probe of kt bench and kt doctor
// (kt_stream_read).
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <xmmintrin.h>

#include "kt_internal.h"

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

