// engine_queue.c: the task queue: submission (kt_submit), the queue thread
// that routes each task and runs it on the workers, the release of a
// finished task, and the callers' waits (kt_sync).
#define _GNU_SOURCE
#include "kt_engine.h"

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

// ---------------------------------------------------------------- running a task

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
  e->tr_pub = now;  // the completion's start (kt_queue_main)
  e->tr_last = 1;
}

// task_setup picks the task's kernels and data formats, none of which
// depend on its routing, and sets e->ntok. It returns -1 (task_error) for a
// task that cannot run.
static int task_setup(kt_engine* e) {
  const kt_batch* b = &e->b;
  int ntok = b->ntok;
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
  e->pf_tiled = kt_is_amx_kernel(e->kpf);
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
    e->r4f = kt_item_block(e, H, 256, (int64_t)FUSED_ITEMS * e->nthreads);
    for (int i = 0; i < H / e->r4f; i++) atomic_store_explicit(&e->hbd[i], 0, memory_order_relaxed);
    e->owned = e->cfg.owned && e->ntok == 1;
    if (e->owned) kt_owned_setup(e);
  }
}

// kt_wait_workers counts the queue thread (worker 0) out of the job and waits
// for every other worker to leave it (dg: done_gen before the job began).
void kt_wait_workers(kt_engine* e, int dg) {
  atomic_fetch_add_explicit(&e->job_done, 1, memory_order_acq_rel);
  while (atomic_load_explicit(&e->job_done, memory_order_acquire) < e->nthreads) {
    kt_wait_change(e, &e->done_gen, dg);
    dg = atomic_load_explicit(&e->done_gen, memory_order_acquire);
  }
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
  kt_run_job(&e->workers[0]);  // the queue thread is worker 0
  if (traced) e->workers[0].tr_end = now_ns();
  kt_wait_workers(e, dg);
  task_release(&e->b);
  ph_mark(e, e->fused ? KT_PH_FUSED : KT_PH_MERGE);
  e->ph_tasks[e->fused ? 1 : 0]++;
  if (traced) trace_task(e, t);
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

void* kt_queue_main(void* arg) {
  kt_engine* e = (kt_engine*)arg;
  kt_worker_init(&e->workers[0]);
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
      kt_run_prefetch(e, &t, head);
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
int kt_enqueue(kt_engine* e, const kt_task* t) {
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
  return kt_enqueue(e, &t);
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
