// Kernels of the backend.Backend op set (Backend in backend.go): the model
// definitions' ops with float32 activations, as the op-set contract says, for
// any shape the models produce (the bf16 kernels of the other modules are
// specialised to the large models' head sizes). The activation type is a
// typedef read and written through ld_act/st_act, so a bf16-activation
// variant is this file compiled with another typedef.
//
// Weights are passed as untyped pointers with a dtype code (WT_F32, WT_BF16,
// WT_F16) and read through ldw: bf16 weights stay bf16 on the device.
//
// Step metadata (Backend.SetStep) lives in fixed device buffers:
//   tokens[t], pos[t], rowseq[t] (row -> sequence index), outrows[j],
//   seq_start[s], seq_len[s], seq_pos[s], seq_slot[s], page_off[s] (first
//   entry of sequence s in pages[]).
// Arithmetic follows the CPU backend (backend/cpu), which is the reference:
// float32 everywhere, float64 where the CPU code widens (exp of gates, the
// rotary angles).

typedef float act_t;
__device__ __forceinline__ float ld_act(const act_t *p, long long i) { return p[i]; }
__device__ __forceinline__ void st_act(act_t *p, long long i, float v) { p[i] = v; }
// ld_act4 / st_act4: elements i..i+3 (i a multiple of 4, 16-byte aligned).
__device__ __forceinline__ void ld_act4(const act_t *p, long long i, float *f) {
	const float4 v = *(const float4 *)(p + i);
	f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
}
__device__ __forceinline__ void st_act4(act_t *p, long long i, const float *f) {
	float4 v;
	v.x = f[0], v.y = f[1], v.z = f[2], v.w = f[3];
	*(float4 *)(p + i) = v;
}

#define WT_F32 0
#define WT_BF16 1
#define WT_F16 2

__device__ __forceinline__ float h2f(unsigned short h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
	unsigned short h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

// ldw reads element i of a weight of dtype code dt as float.
__device__ __forceinline__ float ldw(const void *p, long long i, int dt) {
	if (dt == WT_BF16) return bf2f(((const bf16 *)p)[i]);
	if (dt == WT_F16) return h2f(((const unsigned short *)p)[i]);
	return ((const float *)p)[i];
}

// ldw4 reads weight elements i..i+3 (i a multiple of 4, the weight
// 16-byte aligned) as floats.
__device__ __forceinline__ void ldw4(const void *p, long long i, int dt, float *f) {
	if (dt == WT_F32) {
		const float4 v = *(const float4 *)((const float *)p + i);
		f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
		return;
	}
	const uint2 u = *(const uint2 *)((const unsigned short *)p + i);
	const unsigned short h[4] = {(unsigned short)(u.x & 0xffffu), (unsigned short)(u.x >> 16), (unsigned short)(u.y & 0xffffu),
				     (unsigned short)(u.y >> 16)};
#pragma unroll
	for (int j = 0; j < 4; j++) f[j] = dt == WT_BF16 ? bf2f(h[j]) : h2f(h[j]);
}

// Exact-ish helpers where the CPU backend computes in float64.
__device__ __forceinline__ float silu_d(float x) { return x / (1.0f + (float)exp(-(double)x)); }
__device__ __forceinline__ float sigmoid_d(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

// f32_to_f16: n elements (the activation side of an F16-weight GEMM).
extern "C" __global__ void f32_to_f16(unsigned short *out, const float *in, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) out[i] = f2h(in[i]);
}

// m_embed: out[t] = table[tokens[t]] (ids were checked on the host). grid n.
extern "C" __global__ void m_embed(act_t *out, const void *table, int dt, const int *tokens, int H) {
	KT_GRID_DEP();
	int t = blockIdx.x;
	long long src = (long long)tokens[t] * H;
	for (int i = threadIdx.x; i < H; i += blockDim.x) st_act(out, (long long)t * H + i, ldw(table, src + i, dt));
}

// m_matmul: out[i, o] = Σ_k x[i, k]·w[o, k], one warp per output, for
// shapes cuBLASLt has no algorithm for. grid (ceil(O/8), n), block 256.
extern "C" __global__ void m_matmul(act_t *out, const act_t *x, const void *w, int dt, int O, int K) {
	KT_GRID_DEP();
	int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31, i = blockIdx.y;
	if (o >= O) return;
	float s = 0.0f;
	for (int k = lane; k < K; k += 32) s += ld_act(x, (long long)i * K + k) * ldw(w, (long long)o * K + k, dt);
	s = warp_sum(s);
	if (lane == 0) st_act(out, (long long)i * O + o, s);
}

// rmsnorm_row: block blockIdx.x's row of width d: out = x·rsqrt(mean(x²)+eps)·w
// (out may be x); with t, x += t first and the sum stored back, as m_add
// then m_rmsnorm would (m_add_rmsnorm).
__device__ __forceinline__ void rmsnorm_row(act_t *out, act_t *x, const act_t *t, const void *w, int dt, int d, float eps) {
	__shared__ float scratch[32];
	long long r = (long long)blockIdx.x * d;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < d; i += blockDim.x) {
		if (t) st_act(x, r + i, ld_act(x, r + i) + ld_act(t, r + i));
		float v = ld_act(x, r + i);
		ss += v * v;
	}
	ss = block_sum(ss, scratch);
	float inv = (float)(1.0 / sqrt((double)(ss / (float)d + eps)));
	for (int i = threadIdx.x; i < d; i += blockDim.x) st_act(out, r + i, ldw(w, i, dt) * (ld_act(x, r + i) * inv));
}

// m_rmsnorm: rows of width d: out = x·rsqrt(mean(x²)+eps)·w. out may be x.
// grid rows.
extern "C" __global__ void m_rmsnorm(act_t *out, const act_t *x, const void *w, int dt, int d, float eps) {
	KT_GRID_DEP();
	rmsnorm_row(out, (act_t *)x, nullptr, w, dt, d, eps);
}

// m_add_rmsnorm: x += t, then h = RMSNorm(x) (Backend.AddRMSNorm): m_add
// followed by m_rmsnorm in one launch, h and x bit-identical to theirs.
// grid rows.
extern "C" __global__ void m_add_rmsnorm(act_t *h, act_t *x, const act_t *t, const void *w, int dt, int d, float eps) {
	KT_GRID_DEP();
	rmsnorm_row(h, x, t, w, dt, d, eps);
}

// m_gated_rmsnorm: out = x·rsqrt(mean(x²)+eps)·w·silu(z). grid rows.
extern "C" __global__ void m_gated_rmsnorm(act_t *out, const act_t *x, const act_t *z, const void *w, int dt, int d,
					   float eps) {
	KT_GRID_DEP();
	__shared__ float scratch[32];
	long long r = (long long)blockIdx.x * d;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < d; i += blockDim.x) {
		float v = ld_act(x, r + i);
		ss += v * v;
	}
	ss = block_sum(ss, scratch);
	float inv = (float)(1.0 / sqrt((double)ss / (double)d + (double)eps));
	for (int i = threadIdx.x; i < d; i += blockDim.x)
		st_act(out, r + i, ldw(w, i, dt) * (ld_act(x, r + i) * inv) * silu_d(ld_act(z, r + i)));
}

// NORM_VEC: float4 groups of a row per thread (m_rmsnorm_vec) or lane
// (the warp-per-row norms): rows up to 16·blockDim.x, resp. 128·4 wide.
#define NORM_VEC 4

// rmsnorm_vec_row: rmsnorm_row in one pass for d % 4 == 0, d ≤
// 16·blockDim.x and 16-byte aligned rows and weight: thread t keeps the
// float4 groups t, t + blockDim.x, ... of its row (x, or x + t stored
// back) in registers, its weights loaded before the reduction. The same
// formula; the sum adds in another order than rmsnorm_row's.
__device__ __forceinline__ void rmsnorm_vec_row(act_t *out, act_t *x, const act_t *t, const void *w, int dt, int d, float eps) {
	__shared__ float scratch[32];
	const long long r = (long long)blockIdx.x * d;
	const int q = d >> 2;
	float xv[NORM_VEC][4], wv[NORM_VEC][4];
	float ss = 0.0f;
#pragma unroll
	for (int m = 0; m < NORM_VEC; m++) {
		const int c = threadIdx.x + m * blockDim.x;
		if (c < q) {
			ld_act4(x, r + 4 * c, xv[m]);
			if (t) {
				float tv[4];
				ld_act4(t, r + 4 * c, tv);
#pragma unroll
				for (int j = 0; j < 4; j++) xv[m][j] += tv[j];
				st_act4(x, r + 4 * c, xv[m]);
				ld_act4(x, r + 4 * c, xv[m]); // as stored (a bf16 act_t rounds)
			}
			ldw4(w, 4 * c, dt, wv[m]);
#pragma unroll
			for (int j = 0; j < 4; j++) ss += xv[m][j] * xv[m][j];
		}
	}
	ss = block_sum(ss, scratch);
	const float inv = (float)(1.0 / sqrt((double)(ss / (float)d + eps)));
#pragma unroll
	for (int m = 0; m < NORM_VEC; m++) {
		const int c = threadIdx.x + m * blockDim.x;
		if (c < q) {
			float o[4];
#pragma unroll
			for (int j = 0; j < 4; j++) o[j] = wv[m][j] * (xv[m][j] * inv);
			st_act4(out, r + 4 * c, o);
		}
	}
}

// m_rmsnorm_vec: m_rmsnorm in one pass (rmsnorm_vec_row). grid rows.
extern "C" __global__ void m_rmsnorm_vec(act_t *out, const act_t *x, const void *w, int dt, int d, float eps) {
	KT_GRID_DEP();
	rmsnorm_vec_row(out, (act_t *)x, nullptr, w, dt, d, eps);
}

// m_add_rmsnorm_vec: m_add_rmsnorm on m_rmsnorm_vec's terms, h and x
// bit-identical to m_add followed by m_rmsnorm_vec. grid rows.
extern "C" __global__ void m_add_rmsnorm_vec(act_t *h, act_t *x, const act_t *t, const void *w, int dt, int d, float eps) {
	KT_GRID_DEP();
	rmsnorm_vec_row(h, x, t, w, dt, d, eps);
}

// norm_row_warp: one warp's row of width d (d % 4 == 0, d ≤ 128·NORM_VEC,
// 16-byte aligned): x in xv (float4 group lane + 32m), Σx² in ss (every
// lane), w in wv.
__device__ __forceinline__ float norm_row_warp(const act_t *x, long long r, const void *w, int dt, int d, int lane,
					       float (*xv)[4], float (*wv)[4]) {
	const int q = d >> 2;
	float ss = 0.0f;
#pragma unroll
	for (int m = 0; m < NORM_VEC; m++) {
		const int c = lane + 32 * m;
		if (c < q) {
			ld_act4(x, r + 4 * c, xv[m]);
			ldw4(w, 4 * c, dt, wv[m]);
#pragma unroll
			for (int j = 0; j < 4; j++) ss += xv[m][j] * xv[m][j];
		}
	}
	return warp_sum(ss);
}

// m_rmsnorm_warp: m_rmsnorm with a warp per row for d % 4 == 0, d ≤ 512
// (the per-head q and k norms). grid ceil(rows/8), block 256.
extern "C" __global__ void m_rmsnorm_warp(act_t *out, const act_t *x, const void *w, int dt, int d, float eps, int rows) {
	KT_GRID_DEP();
	const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= rows) return;
	const long long r = (long long)row * d;
	float xv[NORM_VEC][4], wv[NORM_VEC][4];
	const float ss = norm_row_warp(x, r, w, dt, d, lane, xv, wv);
	const float inv = (float)(1.0 / sqrt((double)(ss / (float)d + eps)));
#pragma unroll
	for (int m = 0; m < NORM_VEC; m++) {
		const int c = lane + 32 * m;
		if (c < (d >> 2)) {
			float o[4];
#pragma unroll
			for (int j = 0; j < 4; j++) o[j] = wv[m][j] * (xv[m][j] * inv);
			st_act4(out, r + 4 * c, o);
		}
	}
}

// m_gated_rmsnorm_warp: m_gated_rmsnorm with a warp per row for d % 4 ==
// 0, d ≤ 512 (the gated norm runs per value head). grid ceil(rows/8),
// block 256.
extern "C" __global__ void m_gated_rmsnorm_warp(act_t *out, const act_t *x, const act_t *z, const void *w, int dt, int d,
						float eps, int rows) {
	KT_GRID_DEP();
	const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= rows) return;
	const long long r = (long long)row * d;
	float xv[NORM_VEC][4], wv[NORM_VEC][4], zv[NORM_VEC][4];
#pragma unroll
	for (int m = 0; m < NORM_VEC; m++)
		if (lane + 32 * m < (d >> 2)) ld_act4(z, r + 4 * (lane + 32 * m), zv[m]);
	const float ss = norm_row_warp(x, r, w, dt, d, lane, xv, wv);
	const float inv = (float)(1.0 / sqrt((double)ss / (double)d + (double)eps));
#pragma unroll
	for (int m = 0; m < NORM_VEC; m++) {
		const int c = lane + 32 * m;
		if (c < (d >> 2)) {
			float o[4];
#pragma unroll
			for (int j = 0; j < 4; j++) o[j] = wv[m][j] * (xv[m][j] * inv) * silu_d(zv[m][j]);
			st_act4(out, r + 4 * c, o);
		}
	}
}

// m_rope: NeoX rotate-half on the first rot dims of each head of x viewed as
// [n, heads, hd], position pos[t]. grid (n, heads), block >= rot/2.
extern "C" __global__ void m_rope(act_t *x, const int *pos, int heads, int hd, int rot, float theta) {
	KT_GRID_DEP();
	int t = blockIdx.x, h = blockIdx.y, half = rot / 2;
	long long base = ((long long)t * heads + h) * hd;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float e = (float)(2 * i) / (float)rot;
		float inv = (float)(1.0 / pow((double)theta, (double)e));
		float a = (float)pos[t] * inv;
		float c = (float)cos((double)a), s = (float)sin((double)a);
		float x1 = ld_act(x, base + i), x2 = ld_act(x, base + i + half);
		st_act(x, base + i, x1 * c - x2 * s);
		st_act(x, base + i + half, x2 * c + x1 * s);
	}
}

// m_kv_store: writes row t's k and v (kvw = kvHeads·hd wide) at position
// pos[t] of its sequence's pages. grid n.
extern "C" __global__ void m_kv_store(float *kc, float *vc, const act_t *k, const act_t *v, const int *pos,
				      const int *rowseq, const int *page_off, const int *pages, int page_size, int kvw) {
	KT_GRID_DEP();
	int t = blockIdx.x, p = pos[t];
	long long pg = pages[page_off[rowseq[t]] + p / page_size];
	long long dst = (pg * page_size + p % page_size) * kvw;
	for (int i = threadIdx.x; i < kvw; i += blockDim.x) {
		kc[dst + i] = ld_act(k, (long long)t * kvw + i);
		vc[dst + i] = ld_act(v, (long long)t * kvw + i);
	}
}

// m_attention: causal GQA of row t, head h over its sequence's positions
// 0..pos[t] in the paged cache, online softmax over tiles of blockDim.x
// positions (thread j scores position j of the tile; for P·V thread j owns
// dims j, j+blockDim.x, ...). grid (n, heads), block 128; hd <= 4*128.
#define ATT_T 128
extern "C" __global__ void __launch_bounds__(ATT_T) m_attention(act_t *out, const act_t *q, const float *kc, const float *vc,
								   const int *pos, const int *rowseq, const int *page_off,
								   const int *pages, int page_size, int heads, int kvheads,
								   int hd, float scale) {
	KT_GRID_DEP();
	__shared__ float qs[4 * ATT_T];
	__shared__ float ps[ATT_T];
	__shared__ float scratch[32];
	const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
	const int kvh = h / (heads / kvheads);
	const int npos = pos[t] + 1;
	const int *pg = pages + page_off[rowseq[t]];
	const long long kvw = (long long)kvheads * hd;
	for (int d = tid; d < hd; d += ATT_T) qs[d] = ld_act(q, ((long long)t * heads + h) * hd + d);
	__syncthreads();
	float m = -KT_INF, l = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (int p0 = 0; p0 < npos; p0 += ATT_T) {
		int p = p0 + tid;
		float s = -KT_INF;
		if (p < npos) {
			const float *kr = kc + ((long long)pg[p / page_size] * page_size + p % page_size) * kvw + (long long)kvh * hd;
			float dot = 0.0f;
			for (int d = 0; d < hd; d++) dot += qs[d] * kr[d];
			s = dot * scale;
		}
		float mt = block_max(s, scratch);
		float mn = fmaxf(m, mt);
		float alpha = expf(m - mn);
		float e = p < npos ? expf(s - mn) : 0.0f;
		float st = block_sum(e, scratch);
		ps[tid] = e;
		__syncthreads();
		l = l * alpha + st;
		int cnt = min(ATT_T, npos - p0);
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int d = tid + j * ATT_T;
			if (d < hd) {
				float a = acc[j] * alpha;
				for (int pp = 0; pp < cnt; pp++) {
					int pq = p0 + pp;
					a += ps[pp] * vc[((long long)pg[pq / page_size] * page_size + pq % page_size) * kvw + (long long)kvh * hd + d];
				}
				acc[j] = a;
			}
		}
		m = mn;
		__syncthreads();
	}
#pragma unroll
	for (int j = 0; j < 4; j++) {
		int d = tid + j * ATT_T;
		if (d < hd) st_act(out, ((long long)t * heads + h) * hd + d, acc[j] / l);
	}
}

// m_add: out = a + b over n elements.
extern "C" __global__ void m_add(act_t *out, const act_t *a, const act_t *b, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) st_act(out, i, ld_act(a, i) + ld_act(b, i));
}

// m_lora_add: out[r, j] += s·d[r, j] over the m = rows·w elements of the
// rows r whose request's adapter (row_ad[r], from SetStep) is adapter;
// adapter < 0 selects every row (a static adapter).
extern "C" __global__ void m_lora_add(act_t *out, const act_t *d, const int *row_ad, float s, int adapter, int w, long long m) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= m) return;
	if (adapter >= 0 && row_ad[i / w] != adapter) return;
	st_act(out, i, ld_act(out, i) + s * ld_act(d, i));
}

// m_silu_mul: out = silu(gate)·up over n elements.
extern "C" __global__ void m_silu_mul(act_t *out, const act_t *g, const act_t *u, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) st_act(out, i, silu_d(ld_act(g, i)) * ld_act(u, i));
}

// m_sigmoid_gate: out[r, j] = x[r, j]·sigmoid(gate[r, gw == 1 ? 0 : j]).
extern "C" __global__ void m_sigmoid_gate(act_t *out, const act_t *x, const act_t *gate, int w, int gw, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	long long r = i / w, j = i % w;
	st_act(out, i, ld_act(x, i) * sigmoid_d(ld_act(gate, r * gw + (gw == 1 ? 0 : j))));
}

// router_pad_row: a row at or past *live (the first padding row of a
// decode step padded to its graph bucket; live null: none) routes nowhere:
// ids -1, weights 0, written by lanes lane, lane+step, ... It reports
// whether the row was one.
__device__ __forceinline__ bool router_pad_row(float *wts, int *ids, const int *live, int t, int k, int lane, int step) {
	if (!live || t < *live) return false;
	for (int j = lane; j < k; j += step) {
		ids[(long long)t * k + j] = -1;
		wts[(long long)t * k + j] = 0.0f;
	}
	return true;
}

// m_router_topk: per row of logits [n, E]: softmax, the k largest (ties:
// lower id), renormalised when norm; rows at or past *live route nowhere
// (router_pad_row; the step's rLive region). One thread per row, in the
// CPU's order.
extern "C" __global__ void m_router_topk(float *wts, int *ids, const act_t *logits, int n, int E, int k, int norm, const int *live) {
	KT_GRID_DEP();
	int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= n || router_pad_row(wts, ids, live, t, k, 0, 1)) return;
	const act_t *row = logits + (long long)t * E;
	float mx = ld_act(row, 0);
	for (int c = 1; c < E; c++) mx = fmaxf(mx, ld_act(row, c));
	float sum = 0.0f;
	for (int c = 0; c < E; c++) sum += (float)exp((double)(ld_act(row, c) - mx));
	int *id = ids + (long long)t * k;
	float *w = wts + (long long)t * k;
	for (int j = 0; j < k; j++) {
		int best = -1;
		float bv = 0.0f;
		for (int c = 0; c < E; c++) {
			bool taken = false;
			for (int p = 0; p < j; p++)
				if (id[p] == c) taken = true;
			float v = ld_act(row, c);
			if (!taken && (best < 0 || v > bv)) {
				best = c;
				bv = v;
			}
		}
		id[j] = best;
		w[j] = (float)exp((double)(bv - mx)) / sum;
	}
	if (norm) {
		float s = 0.0f;
		for (int j = 0; j < k; j++) s += w[j];
		for (int j = 0; j < k; j++) w[j] /= s;
	}
}

// warp_argmax leaves in every lane the warp's largest bv and its index
// best (ties to the lower index; best < 0 marks a lane with none).
__device__ __forceinline__ void warp_argmax(int &best, float &bv) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const int ob = __shfl_xor_sync(0xffffffffu, best, o);
		const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) {
			best = ob;
			bv = ov;
		}
	}
}

// m_router_topk_warp: m_router_topk with a warp per row (the row and its
// taken flags in shared memory): the same selection (the k largest logits,
// ties to the lower id) and weights e^{l−max}/Σe^{l−max} (renormalised when
// norm); only the softmax sum's order differs. grid ceil(n/4), block 128,
// smem 20·E bytes (4 rows of E floats, then 4 × E taken flags).
extern "C" __global__ void m_router_topk_warp(float *wts, int *ids, const act_t *logits, int n, int E, int k, int norm, const int *live) {
	KT_GRID_DEP();
	extern __shared__ float rsm[];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int t = blockIdx.x * 4 + warp;
	if (t >= n || router_pad_row(wts, ids, live, t, k, lane, 32)) return; // the whole warp: no block-wide barriers below
	float *v = rsm + warp * E;
	unsigned char *taken = (unsigned char *)(rsm + 4 * E) + warp * E;
	const act_t *row = logits + (long long)t * E;
	float mx = -KT_INF;
	for (int c = lane; c < E; c += 32) {
		const float x = ld_act(row, c);
		v[c] = x;
		taken[c] = 0;
		mx = fmaxf(mx, x);
	}
	mx = warp_max(mx);
	float sum = 0.0f;
	for (int c = lane; c < E; c += 32) sum += (float)exp((double)(v[c] - mx));
	sum = warp_sum(sum);
	__syncwarp();
	int *id = ids + (long long)t * k;
	float *w = wts + (long long)t * k;
	for (int j = 0; j < k; j++) {
		int best = -1;
		float bv = 0.0f;
		for (int c = lane; c < E; c += 32)
			if (!taken[c] && (best < 0 || v[c] > bv)) {
				best = c;
				bv = v[c];
			}
		warp_argmax(best, bv);
		if (lane == 0) {
			id[j] = best;
			w[j] = (float)exp((double)(bv - mx)) / sum;
		}
		if (best >= 0 && lane == (best & 31)) taken[best] = 1;
		__syncwarp();
	}
	if (norm && lane == 0) {
		float s = 0.0f;
		for (int j = 0; j < k; j++) s += w[j];
		for (int j = 0; j < k; j++) w[j] /= s;
	}
}

// m_router_topk_reg: m_router_topk_warp for E ≤ 256 and k ≤ 32 with the
// row in registers: lane l holds logits l, l+32, ... (ROUTER_REG at most)
// and their e^{l−max}; each of the k rounds is a scan of those registers
// and one warp argmax (ties to the lower id), the weights stay in lanes
// 0..k-1 until written. The same ids and weights as m_router_topk_warp,
// bit for bit: the same softmax sum order, the winner's summed e^{l−max},
// the renormalising sum in j order. grid ceil(n/4), block 128.
#define ROUTER_REG 8
extern "C" __global__ void m_router_topk_reg(float *wts, int *ids, const act_t *logits, int n, int E, int k, int norm, const int *live) {
	KT_GRID_DEP();
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int t = blockIdx.x * 4 + warp;
	if (t >= n || router_pad_row(wts, ids, live, t, k, lane, 32)) return; // the whole warp
	const act_t *row = logits + (long long)t * E;
	float v[ROUTER_REG], e[ROUTER_REG];
	float mx = -KT_INF;
#pragma unroll
	for (int m = 0; m < ROUTER_REG; m++) {
		const int c = lane + 32 * m;
		v[m] = c < E ? ld_act(row, c) : -KT_INF;
		if (c < E) mx = fmaxf(mx, v[m]);
	}
	mx = warp_max(mx);
	float sum = 0.0f;
#pragma unroll
	for (int m = 0; m < ROUTER_REG; m++) {
		e[m] = (float)exp((double)(v[m] - mx));
		if (lane + 32 * m < E) sum += e[m];
	}
	sum = warp_sum(sum);
	unsigned taken = 0; // bit m: logit lane + 32m is chosen
	int myid = -1;      // lane j < k: id j
	float myw = 0.0f;   // lane j < k: weight j
	for (int j = 0; j < k; j++) {
		int best = -1;
		float bv = 0.0f, be = 0.0f;
#pragma unroll
		for (int m = 0; m < ROUTER_REG; m++) {
			const int c = lane + 32 * m;
			if (c < E && !((taken >> m) & 1u) && (best < 0 || v[m] > bv)) {
				best = c;
				bv = v[m];
				be = e[m];
			}
		}
		warp_argmax(best, bv);
		// The winning lane's own best is the winner: its e^{l−max}.
		const float w = __shfl_sync(0xffffffffu, be, best & 31) / sum;
		if (best >= 0 && lane == (best & 31)) taken |= 1u << (best >> 5);
		if (lane == j) {
			myid = best;
			myw = w;
		}
	}
	if (norm) {
		float s = 0.0f;
		for (int j = 0; j < k; j++) s += __shfl_sync(0xffffffffu, myw, j);
		myw /= s;
	}
	if (lane < k) {
		ids[(long long)t * k + lane] = myid;
		wts[(long long)t * k + lane] = myw;
	}
}

// Routed experts. ptrs holds per expert the device addresses of its gate,
// up and down weights: ptrs[3e], ptrs[3e+1], ptrs[3e+2]. Pair p = t·k + j
// runs expert ids[p] on row t (skipped when the id is outside [0, E)).
//
// m_moe_gateup: hbuf[p, i] = silu(gate_e[i]·x[t])·(up_e[i]·x[t]).
// grid (n·k, ceil(I/8)), block 256 (a warp per i), smem H floats.
extern "C" __global__ void m_moe_gateup(float *hbuf, const act_t *x, const int *ids, const u64 *ptrs, int gdt, int udt,
					int H, int I, int k, int E) {
	KT_GRID_DEP();
	extern __shared__ float xs[];
	const int p = blockIdx.x, e = ids[p], t = p / k;
	if (e < 0 || e >= E) return;
	for (int c = threadIdx.x; c < H; c += blockDim.x) xs[c] = ld_act(x, (long long)t * H + c);
	__syncthreads();
	const int i = blockIdx.y * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (i >= I) return;
	const void *gw = (const void *)ptrs[3 * e], *uw = (const void *)ptrs[3 * e + 1];
	float g = 0.0f, u = 0.0f;
	for (int c = lane; c < H; c += 32) {
		g += xs[c] * ldw(gw, (long long)i * H + c, gdt);
		u += xs[c] * ldw(uw, (long long)i * H + c, udt);
	}
	g = warp_sum(g);
	u = warp_sum(u);
	if (lane == 0) hbuf[(long long)p * I + i] = silu_d(g) * u;
}

// m_moe_down: ybuf[p, c] = down_e[c]·hbuf[p]. grid (n·k, ceil(H/8)), block
// 256, smem I floats.
extern "C" __global__ void m_moe_down(float *ybuf, const float *hbuf, const int *ids, const u64 *ptrs, int ddt, int H,
				      int I, int E) {
	KT_GRID_DEP();
	extern __shared__ float hs[];
	const int p = blockIdx.x, e = ids[p];
	if (e < 0 || e >= E) return;
	for (int c = threadIdx.x; c < I; c += blockDim.x) hs[c] = hbuf[(long long)p * I + c];
	__syncthreads();
	const int c = blockIdx.y * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (c >= H) return;
	const void *dw = (const void *)ptrs[3 * e + 2];
	float s = 0.0f;
	for (int i = lane; i < I; i += 32) s += hs[i] * ldw(dw, (long long)c * I + i, ddt);
	s = warp_sum(s);
	if (lane == 0) ybuf[(long long)p * H + c] = s;
}

// bf16x8: the 8 bf16 of u as floats (load8 on a loaded register).
__device__ __forceinline__ void bf16x8(uint4 u, float *f) {
	const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		f[2 * i] = __uint_as_float(w[i] << 16);
		f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
	}
}

// MOE_PF: 16-byte weight loads per lane and matrix issued before the
// activations are read, so the weight stream starts at once (a decode
// step's expert GEMVs are short: I = 512..768 is 2-3 loads per lane for
// down).
#define MOE_PF 4

// m_moe_gateup_bf16: m_moe_gateup for bf16 gate and up weights with
// H % 256 == 0: a warp per intermediate row i, each lane reading 8
// consecutive weights (16 bytes) per load, the first MOE_PF of each matrix
// issued together, then its 8 activations per step straight from global
// memory (the pair's 8 KiB row, shared by all its blocks through L1/L2).
// Staging that row in shared memory behind a barrier first was 8 % slower
// for the whole MoE op at one token (docs/notes/decodegpu.md, session 14).
// grid (n·k, ceil(I/8)), block 256.
extern "C" __global__ void m_moe_gateup_bf16(float *hbuf, const act_t *x, const int *ids, const u64 *ptrs, int H, int I,
					     int k, int E) {
	KT_GRID_DEP();
	const int p = blockIdx.x, e = ids[p], t = p / k;
	if (e < 0 || e >= E) return;
	const int i = blockIdx.y * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (i >= I) return;
	const bf16 *gw = (const bf16 *)ptrs[3 * e] + (long long)i * H, *uw = (const bf16 *)ptrs[3 * e + 1] + (long long)i * H;
	const float *xr = x + (long long)t * H;
	uint4 pg[MOE_PF], pu[MOE_PF];
#pragma unroll
	for (int j = 0; j < MOE_PF; j++) {
		const int c = lane * 8 + j * 256;
		if (c < H) {
			pg[j] = *(const uint4 *)(gw + c);
			pu[j] = *(const uint4 *)(uw + c);
		}
	}
	float g = 0.0f, u = 0.0f;
#pragma unroll
	for (int j = 0; j < MOE_PF; j++) {
		const int c = lane * 8 + j * 256;
		if (c < H) {
			float wg[8], wu[8];
			bf16x8(pg[j], wg);
			bf16x8(pu[j], wu);
			const float4 a = *(const float4 *)(xr + c), b = *(const float4 *)(xr + c + 4);
			const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
			for (int q = 0; q < 8; q++) {
				g += xv[q] * wg[q];
				u += xv[q] * wu[q];
			}
		}
	}
#pragma unroll 4
	for (int c = lane * 8 + MOE_PF * 256; c < H; c += 256) {
		float wg[8], wu[8];
		load8(gw + c, wg);
		load8(uw + c, wu);
		const float4 a = *(const float4 *)(xr + c), b = *(const float4 *)(xr + c + 4);
		const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
		for (int q = 0; q < 8; q++) {
			g += xv[q] * wg[q];
			u += xv[q] * wu[q];
		}
	}
	g = warp_sum(g);
	u = warp_sum(u);
	if (lane == 0) hbuf[(long long)p * I + i] = silu_d(g) * u;
}

// m_moe_down_bf16: m_moe_down for bf16 down weights with I % 256 == 0: a
// warp per output row, 16-byte weight loads, the first MOE_PF issued
// together, the pair's h row read from global memory (2 % faster than
// staging it in shared memory; session 14). grid (n·k, ceil(H/8)), block 256.
extern "C" __global__ void m_moe_down_bf16(float *ybuf, const float *hbuf, const int *ids, const u64 *ptrs, int H, int I,
					   int E) {
	KT_GRID_DEP();
	const int p = blockIdx.x, e = ids[p];
	if (e < 0 || e >= E) return;
	const int c = blockIdx.y * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (c >= H) return;
	const bf16 *dw = (const bf16 *)ptrs[3 * e + 2] + (long long)c * I;
	const float *hs = hbuf + (long long)p * I;
	uint4 pw[MOE_PF];
#pragma unroll
	for (int j = 0; j < MOE_PF; j++) {
		const int i = lane * 8 + j * 256;
		if (i < I) pw[j] = *(const uint4 *)(dw + i);
	}
	float s = 0.0f;
#pragma unroll
	for (int j = 0; j < MOE_PF; j++) {
		const int i = lane * 8 + j * 256;
		if (i < I) {
			float w[8];
			bf16x8(pw[j], w);
			const float4 a = *(const float4 *)(hs + i), b = *(const float4 *)(hs + i + 4);
			s += a.x * w[0] + a.y * w[1] + a.z * w[2] + a.w * w[3] + b.x * w[4] + b.y * w[5] + b.z * w[6] + b.w * w[7];
		}
	}
#pragma unroll 4
	for (int i = lane * 8 + MOE_PF * 256; i < I; i += 256) {
		float w[8];
		load8(dw + i, w);
		const float4 a = *(const float4 *)(hs + i), b = *(const float4 *)(hs + i + 4);
		s += a.x * w[0] + a.y * w[1] + a.z * w[2] + a.w * w[3] + b.x * w[4] + b.y * w[5] + b.z * w[6] + b.w * w[7];
	}
	s = warp_sum(s);
	if (lane == 0) ybuf[(long long)p * H + c] = s;
}

// m_moe_mask_ids: out[p] = ids[p] when that expert has weights in the
// table (non-null gate entry), else -1 (experts served elsewhere, e.g. by
// the CPU expert engine). grid ceil(n/256) x 256.
extern "C" __global__ void m_moe_mask_ids(int *out, const int *ids, const u64 *ptrs, int n, int E) {
	KT_GRID_DEP();
	const int p = blockIdx.x * blockDim.x + threadIdx.x;
	if (p >= n) return;
	const int e = ids[p];
	out[p] = (e >= 0 && e < E && ptrs[3 * e] != 0) ? e : -1;
}

// m_moe_combine: out[t] = Σ_j wts[t, j]·ybuf[t·k + j] over valid ids, a
// thread per element (a decode step's row spreads over H/256 blocks).
// grid (n, ceil(H/256)), block 256.
extern "C" __global__ void m_moe_combine(act_t *out, const float *ybuf, const float *wts, const int *ids, int k, int H,
					 int E) {
	KT_GRID_DEP();
	const int t = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
	if (c >= H) return;
	float s = 0.0f;
	for (int j = 0; j < k; j++) {
		int e = ids[t * k + j];
		if (e >= 0 && e < E) s += wts[t * k + j] * ybuf[((long long)t * k + j) * H + c];
	}
	st_act(out, (long long)t * H + c, s);
}

// split_bf16 writes x as the sum of two bf16 values, hi = round(x) and
// lo = round(x - hi): ~16 bits more precision than x rounded once.
__device__ __forceinline__ void split_bf16(float x, bf16 *hi, bf16 *lo) {
	const bf16 h = f2bf(x);
	*hi = h;
	*lo = f2bf(x - bf2f(h));
}

// The MoE op's grouped path (moe_grouped.go), for prefill-sized steps: the
// pairs sorted by expert (moe_align, each expert's rows padded to BM), each
// expert's rows through cuBLASLt GEMMs, activations split into two bf16
// parts (as MatMul's m_split_bf16) so the products keep ~f32 precision.

// m_moe_gather_split: row r of the expert-sorted rows as hi = bf16(x[t]),
// lo = bf16(x[t] - hi), t = sorted[r] / k; padding rows (sorted < 0) zero.
// grid rows (counts[E]·BM used), block 256.
extern "C" __global__ void m_moe_gather_split(bf16 *hi, bf16 *lo, const act_t *x, const int *sorted, const int *counts,
					      int E, int BM, int H, int k) {
	KT_GRID_DEP();
	const int r = blockIdx.x;
	if (r >= counts[E] * BM) return;
	const int p = sorted[r];
	bf16 *dh = hi + (long long)r * H, *dl = lo + (long long)r * H;
	for (int i = threadIdx.x; i < H; i += blockDim.x) {
		split_bf16(p < 0 ? 0.0f : ld_act(x, (long long)(p / k) * H + i), dh + i, dl + i);
	}
}

// m_moe_act_split: a = silu(g)·u per element of the sorted rows (g, u the
// gate and up GEMMs' f32 outputs), written as hi/lo bf16 parts.
// grid rows (counts[E]·BM used), block 256.
extern "C" __global__ void m_moe_act_split(bf16 *hi, bf16 *lo, const float *g, const float *u, const int *counts, int E,
					   int BM, int I) {
	KT_GRID_DEP();
	const int r = blockIdx.x;
	if (r >= counts[E] * BM) return;
	for (int i = threadIdx.x; i < I; i += blockDim.x) {
		const long long j = (long long)r * I + i;
		split_bf16(silu_d(g[j]) * u[j], hi + j, lo + j);
	}
}

// m_moe_combine_rows: out[t] = Σ_j wts[t, j]·y[pos[t·k + j]] over the pairs
// whose expert ran (pos ≥ 0), in slot order as m_moe_combine; y holds the
// expert-sorted rows. grid (n, ceil(H/256)), block 256.
extern "C" __global__ void m_moe_combine_rows(act_t *out, const float *y, const float *wts, const int *pos, int k, int H) {
	KT_GRID_DEP();
	const int t = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
	if (c >= H) return;
	float s = 0.0f;
	for (int j = 0; j < k; j++) {
		const int r = pos[t * k + j];
		if (r >= 0) s += wts[t * k + j] * y[(long long)r * H + c];
	}
	st_act(out, (long long)t * H + c, s);
}

// m_gather_rows: out[j] = x[outrows[first + j]]. grid count.
extern "C" __global__ void m_gather_rows(act_t *out, const act_t *x, const int *outrows, int first, int d) {
	KT_GRID_DEP();
	int j = blockIdx.x;
	long long src = (long long)outrows[first + j] * d;
	for (int i = threadIdx.x; i < d; i += blockDim.x) st_act(out, (long long)j * d + i, ld_act(x, src + i));
}

// Linear attention. State layouts (per slot, per linear layer):
//   conv:  [slots, layers, K-1, C]        float32, oldest row first
//   delta: [slots, layers, S | K | U | G]  float32, the chunked form (m_gdn_chunk)
// A sequence whose step span starts at position 0 reads zero state.

// m_conv1d: out[t, c] = silu(Σ_j w[c, j]·in(t-K+1+j, c)), earlier inputs
// from the state. grid (ceil(C/128), n), block 128.
extern "C" __global__ void m_conv1d(act_t *out, const act_t *x, const void *w, int wdt, const float *state, int layer,
				    int layers, const int *rowseq, const int *seq_start, const int *seq_pos,
				    const int *seq_slot, int C, int K) {
	KT_GRID_DEP();
	const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (c >= C) return;
	const int s = rowseq[t], start = seq_start[s], j = t - start, hist = K - 1;
	const bool fresh = seq_pos[s] == 0;
	const float *st = state + ((long long)seq_slot[s] * layers + layer) * hist * C;
	float o = 0.0f;
	for (int kk = 0; kk < K; kk++) {
		int r = j - hist + kk;
		float v;
		if (r >= 0) v = ld_act(x, (long long)(start + r) * C + c);
		else v = fresh ? 0.0f : st[(long long)(hist + r) * C + c];
		o = fmaf(ldw(w, (long long)c * K + kk, wdt), v, o);
	}
	st_act(out, (long long)t * C + c, silu_d(o));
}

// m_conv_state: after m_conv1d, keep the last K-1 inputs of (state ++ the
// span's rows). grid (ceil(C/128), sequences), block 128.
extern "C" __global__ void m_conv_state(float *state, const act_t *x, int layer, int layers, const int *seq_start,
					const int *seq_len, const int *seq_pos, const int *seq_slot, int C, int K) {
	KT_GRID_DEP();
	const int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
	if (c >= C) return;
	const int hist = K - 1, start = seq_start[s], n = seq_len[s];
	const bool fresh = seq_pos[s] == 0;
	float *st = state + ((long long)seq_slot[s] * layers + layer) * hist * C;
	for (int i = 0; i < hist; i++) {
		int r = n - hist + i; // row of the span, negative: older state
		float v;
		if (r >= 0) v = ld_act(x, (long long)(start + r) * C + c);
		else v = fresh ? 0.0f : st[(long long)(hist + r) * C + c];
		st[(long long)i * C + c] = v;
	}
}

// m_conv1d_decode: m_conv1d then m_conv_state for a step whose every
// sequence has one row (a decode step), in one pass with the same
// arithmetic: out = silu(w·[state rows, x]) and the state moves up a row
// (x enters last). grid (ceil(C/128), sequences), block 128.
extern "C" __global__ void m_conv1d_decode(act_t *out, const act_t *x, const void *w, int wdt, float *state, int layer,
					   int layers, const int *seq_start, const int *seq_pos, const int *seq_slot, int C,
					   int K) {
	KT_GRID_DEP();
	const int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
	if (c >= C) return;
	const int t = seq_start[s], hist = K - 1;
	const bool fresh = seq_pos[s] == 0;
	float *st = state + ((long long)seq_slot[s] * layers + layer) * hist * C + c;
	const float xv = ld_act(x, (long long)t * C + c);
	float o = 0.0f;
	for (int kk = 0; kk < hist; kk++) {
		const float v = fresh ? 0.0f : st[(long long)kk * C];
		o = fmaf(ldw(w, (long long)c * K + kk, wdt), v, o);
		if (kk > 0) st[(long long)(kk - 1) * C] = v;
	}
	o = fmaf(ldw(w, (long long)c * K + hist, wdt), xv, o);
	if (hist > 0) st[(long long)(hist - 1) * C] = xv;
	st_act(out, (long long)t * C + c, silu_d(o));
}

// m_delta_gates: g = -exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b),
// over [n, Hv].
extern "C" __global__ void m_delta_gates(float *g, float *beta, const act_t *a, const act_t *b, const void *alog, int adt,
					 const void *dtb, int ddt, int Hv, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	int h = i % Hv;
	float negA = -(float)exp((double)ldw(alog, h, adt));
	float x = ld_act(a, i) + ldw(dtb, h, ddt);
	float sp = x > 20.0f ? x : (float)log1p(exp((double)x));
	g[i] = negA * sp;
	beta[i] = sigmoid_d(ld_act(b, i));
}

// m_gdn: the gated delta rule token by token (the recurrent form, on a plain
// [slots, layers, Hv, Dk, Dv] state; kept as the benchmarks' baseline) over each
// sequence's span, value head h, value columns [32·blockIdx.y, +32): thread
// `lane` owns column j of S (Dk rows in shared memory, row stride 33).
//   q, k <- l2norm(q)/sqrt(Dk), l2norm(k)   (eps 1e-6 inside the sqrt)
//   S <- e^g·S;  u = β(v - Sᵀk);  S <- S + k uᵀ;  o = Sᵀq
// qkv rows are C wide: q [Hk·Dk] | k [Hk·Dk] | v [Hv·Dv]; value head h uses
// key head h / (Hv/Hk). grid (Hv, ceil(Dv/32), sequences), block 32,
// smem (Dk·33 + 2·Dk) floats.
extern "C" __global__ void __launch_bounds__(32) m_gdn(act_t *out, const act_t *qkv, const float *g, const float *beta,
							float *state, int layer, int layers, const int *seq_start,
							const int *seq_len, const int *seq_pos, const int *seq_slot, int C,
							int Hk, int Hv, int Dk, int Dv) {
	KT_GRID_DEP();
	extern __shared__ float sm[];
	float *S = sm, *qs = sm + Dk * 33, *ks = qs + Dk;
	const int h = blockIdx.x, s = blockIdx.z, lane = threadIdx.x;
	const int j = blockIdx.y * 32 + lane;
	const bool col = j < Dv;
	const int kh = h / (Hv / Hk);
	const int start = seq_start[s], n = seq_len[s];
	float *st = state + (((long long)seq_slot[s] * layers + layer) * Hv + h) * Dk * Dv;
	const bool fresh = seq_pos[s] == 0;
	for (int i = 0; i < Dk; i++) S[i * 33 + lane] = (col && !fresh) ? st[(long long)i * Dv + j] : 0.0f;
	const float scale = (float)(1.0 / sqrt((double)Dk));
	const int vw = Hv * Dv;
	for (int tt = 0; tt < n; tt++) {
		const long long row = (long long)(start + tt) * C;
		float sq = 0.0f, sk = 0.0f;
		for (int i = lane; i < Dk; i += 32) {
			float qv = ld_act(qkv, row + (long long)kh * Dk + i), kv = ld_act(qkv, row + (long long)Hk * Dk + kh * Dk + i);
			qs[i] = qv;
			ks[i] = kv;
			sq += qv * qv;
			sk += kv * kv;
		}
		sq = warp_sum(sq);
		sk = warp_sum(sk);
		float rq = (float)(1.0 / sqrt((double)(sq + 1e-6f))), rk = (float)(1.0 / sqrt((double)(sk + 1e-6f)));
		__syncwarp();
		for (int i = lane; i < Dk; i += 32) {
			qs[i] = (qs[i] * rq) * scale;
			ks[i] = ks[i] * rk;
		}
		__syncwarp();
		const long long gi = (long long)(start + tt) * Hv + h;
		const float decay = (float)exp((double)g[gi]), bt = beta[gi];
		float mem = 0.0f;
		for (int i = 0; i < Dk; i++) {
			float v = S[i * 33 + lane] * decay;
			S[i * 33 + lane] = v;
			mem += ks[i] * v;
		}
		float vj = col ? ld_act(qkv, row + 2LL * Hk * Dk + (long long)h * Dv + j) : 0.0f;
		float u = (vj - mem) * bt;
		float o = 0.0f;
		for (int i = 0; i < Dk; i++) {
			float v = S[i * 33 + lane] + ks[i] * u;
			S[i * 33 + lane] = v;
			o += qs[i] * v;
		}
		if (col) st_act(out, (long long)(start + tt) * vw + (long long)h * Dv + j, o);
		__syncwarp();
	}
	if (col)
		for (int i = 0; i < Dk; i++) st[(long long)i * Dv + j] = S[i * 33 + lane];
}

// The gated delta rule in the chunked form the CPU backend keeps
// (backend/cpu.DeltaState): per (slot, layer) the recurrent state S at the
// last 64-token boundary of the sequence plus the rows of the open chunk,
//   S [Hv, Dk, Dv] | K [64, Hk, Dk] (normalised keys) |
//   U [64, Hv, Dv] (corrected values) | G [64, Hv] (cumulative log decay)
// (GDN_CHUNK rows, aligned to absolute positions). Within a chunk,
//   u_i = β_i(v_i − e^{G_i}·k_iᵀS) − Σ_{j<i} β_i(k_i·k_j)e^{G_i−G_j}·u_j
//   o_i = e^{G_i}·q_iᵀS + Σ_{j≤i} (q_i·k_j)e^{G_i−G_j}·u_j
// and when a chunk fills, S ← e^{G_63}·S + Σ_j e^{G_63−G_j}·k_j u_jᵀ.
// Every row is computed with the same arithmetic whatever rows arrived
// with it, so a prompt prefilled in pieces gives bit-identical outputs and
// state to one prefill. The rows of a chunk are processed together: the
// dot products, kᵀS/qᵀS, the outputs and the state update are parallel
// over rows; only the triangular solve for u runs row after row.
#define GDN_CHUNK 64
#define GDN_CB 32   // value columns per block
#define GDN_NT 128  // threads per block: 4 per column in the solve

// gdn_norm_row: dst[0..Dk) = l2norm(src)·scale by one warp (the CPU's l2Row:
// x·(1/sqrt(Σx² + 1e-6))·scale). m_gdn_chunk and m_gdn_commit both use it,
// so the keys they store agree bit for bit.
__device__ __forceinline__ void gdn_norm_row(const act_t *qkv, long long off, float *dst, int Dk, float scale, int lane) {
	float ss = 0.0f;
	for (int d = lane; d < Dk; d += 32) {
		float v = ld_act(qkv, off + d);
		dst[d] = v;
		ss = fmaf(v, v, ss);
	}
	ss = warp_sum(ss);
	const float inv = (float)(1.0 / sqrt((double)(ss + 1e-6f)));
	__syncwarp();
	for (int d = lane; d < Dk; d += 32) dst[d] = (dst[d] * inv) * scale;
	__syncwarp();
}

// gdn_sum8 combines 8 partial sums as ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)):
// the order an xor butterfly over 8 lanes (offsets 1, 2, 4) gives too.
__device__ __forceinline__ float gdn_sum8(const float *a) {
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// gdn_dot: Σ_d a[d]·b[d·sb] over d < n in the gated delta rule's fixed
// order: 8 partial sums over d ≡ p (mod 8), ascending, by fused
// multiply-adds, combined by gdn_sum8. m_gdn_decode spreads the same
// partial sums over 8 lanes or 8 warps, so both kernels round alike.
__device__ __forceinline__ float gdn_dot(const float *a, const float *b, int sb, int n) {
	float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
	for (int d0 = 0; d0 < n; d0 += 8)
#pragma unroll
		for (int p = 0; p < 8; p++)
			if (d0 + p < n) acc[p] = fmaf(a[d0 + p], b[(long long)(d0 + p) * sb], acc[p]);
	return gdn_sum8(acc);
}

// m_gdn_chunk: grid (Hv, ceil(Dv/GDN_CB), sequences), block GDN_NT, dynamic
// smem per gdnChunkSmem (Go). Rows are processed in segments of at most
// segcap (≤ 64, the step's longest span) so a decode step takes little
// shared memory and several blocks fit on an SM. Reads the open chunk's K,
// U and G from the state and writes S (when a chunk filled or the sequence
// is fresh) and U; m_gdn_commit then writes K and G (other blocks of the
// same head read them here, so they are written after this grid).
extern "C" __global__ void __launch_bounds__(GDN_NT) m_gdn_chunk(act_t *out, const act_t *qkv, const float *g, const float *beta,
								   float *state, int layer, int layers, const int *seq_start,
								   const int *seq_len, const int *seq_pos, const int *seq_slot, int C,
								   int Hk, int Hv, int Dk, int Dv, int segcap) {
	KT_GRID_DEP();
	extern __shared__ float sm[];
	const int ldk = Dk + 1, ldc = GDN_CB + 1, ldr = GDN_CHUNK + 1;
	float *Ss = sm;                      // [Dk][ldc]
	float *Ks = Ss + Dk * ldc;           // [64][ldk] normalised keys of the chunk
	float *Us = Ks + GDN_CHUNK * ldk;    // [64][ldc] u rows, this block's columns
	// Segment rows (index i − r):
	float *Qs = Us + GDN_CHUNK * ldc;    // [segcap][ldk] normalised, scaled queries
	float *Os = Qs + segcap * ldk;       // [segcap][ldc] e^{G_i}·q_iᵀS
	float *A = Os + segcap * ldc;        // [segcap][ldr] −β_i(k_i·k_j)e^{G_i−G_j}, j < i
	float *Bq = A + segcap * ldr;        // [segcap][ldr] (q_i·k_j)e^{G_i−G_j}, j ≤ i (no decay at j = i)
	float *Gs = Bq + segcap * ldr;       // [64] cumulative log decay
	float *Bs = Gs + GDN_CHUNK;          // [64] beta
	float *Ds = Bs + GDN_CHUNK;          // [64] e^{G_last − G_j} at a flush

	const int h = blockIdx.x, s = blockIdx.z, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int x0 = blockIdx.y * GDN_CB;
	const int kh = h / (Hv / Hk);
	const int start = seq_start[s], n = seq_len[s], pos = seq_pos[s];
	const bool fresh = pos == 0;
	const long long per = (long long)Hv * Dk * Dv + (long long)GDN_CHUNK * Hk * Dk + (long long)GDN_CHUNK * Hv * Dv + GDN_CHUNK * Hv;
	float *base = state + ((long long)seq_slot[s] * layers + layer) * per;
	float *Sg = base + (long long)h * Dk * Dv;
	const float *Kg = base + (long long)Hv * Dk * Dv;
	float *Ug = (float *)Kg + (long long)GDN_CHUNK * Hk * Dk;
	const float *Gg = Ug + (long long)GDN_CHUNK * Hv * Dv;
	const float scale = (float)(1.0 / sqrt((double)Dk));
	const int vw = Hv * Dv;
	const long long qoff = (long long)kh * Dk, koff = (long long)Hk * Dk + (long long)kh * Dk, voff = 2LL * Hk * Dk + (long long)h * Dv;

	// Load the S tile and the open rows.
	for (int i = tid; i < Dk * GDN_CB; i += GDN_NT) {
		int d = i / GDN_CB, x = i % GDN_CB;
		Ss[d * ldc + x] = (fresh || x0 + x >= Dv) ? 0.0f : Sg[(long long)d * Dv + x0 + x];
	}
	const int rows0 = pos % GDN_CHUNK; // 0 when fresh
	for (int i = tid; i < rows0 * Dk; i += GDN_NT) {
		int j = i / Dk, d = i % Dk;
		Ks[j * ldk + d] = Kg[((long long)j * Hk + kh) * Dk + d];
	}
	for (int i = tid; i < rows0 * GDN_CB; i += GDN_NT) {
		int j = i / GDN_CB, x = i % GDN_CB;
		Us[j * ldc + x] = x0 + x < Dv ? Ug[((long long)j * Hv + h) * Dv + x0 + x] : 0.0f;
	}
	for (int j = tid; j < rows0; j += GDN_NT) Gs[j] = Gg[(long long)j * Hv + h];

	bool flushed = false;
	int r = rows0;
	for (int t = 0; t < n;) {
		const int seg = min(min(GDN_CHUNK - r, n - t), segcap), end = r + seg;
		__syncthreads();
		// q and k rows of the segment, one warp per row.
		for (int i = r + warp; i < end; i += GDN_NT / 32) {
			const long long row = (long long)(start + t + i - r) * C;
			gdn_norm_row(qkv, row + qoff, Qs + (i - r) * ldk, Dk, scale, lane);
			gdn_norm_row(qkv, row + koff, Ks + i * ldk, Dk, 1.0f, lane);
		}
		if (tid == 0) {
			float acc = r > 0 ? Gs[r - 1] : 0.0f;
			for (int i = r; i < end; i++) {
				const long long gi = (long long)(start + t + i - r) * Hv + h;
				acc = i == 0 ? g[gi] : g[gi] + acc; // i == 0 only when r == 0
				Gs[i] = acc;
				Bs[i] = beta[gi];
			}
		}
		__syncthreads();
		// Dot products with the chunk's keys, decays folded in.
		for (int p = tid; p < seg * GDN_CHUNK; p += GDN_NT) {
			const int i = r + p / GDN_CHUNK, j = p % GDN_CHUNK;
			if (j > i) continue;
			const float *ki = Ks + i * ldk, *qi = Qs + (i - r) * ldk, *kj = Ks + j * ldk;
			const float kk = gdn_dot(ki, kj, 1, Dk), qk = gdn_dot(qi, kj, 1, Dk);
			if (j == i) {
				Bq[(i - r) * ldr + j] = qk;
			} else {
				const float dec = (float)exp((double)(Gs[i] - Gs[j]));
				A[(i - r) * ldr + j] = (-Bs[i] * kk) * dec;
				Bq[(i - r) * ldr + j] = qk * dec;
			}
		}
		// kᵀS and qᵀS: the right-hand side of the solve and the state part of o.
		for (int p = tid; p < seg * GDN_CB; p += GDN_NT) {
			const int i = r + p / GDN_CB, x = p % GDN_CB;
			const float *ki = Ks + i * ldk, *qi = Qs + (i - r) * ldk;
			const float ks = gdn_dot(ki, Ss + x, ldc, Dk), qs = gdn_dot(qi, Ss + x, ldc, Dk);
			const float ei = (float)exp((double)Gs[i]);
			const float v = x0 + x < Dv ? ld_act(qkv, (long long)(start + t + i - r) * C + voff + x0 + x) : 0.0f;
			Us[i * ldc + x] = Bs[i] * fmaf(-ei, ks, v);
			Os[(i - r) * ldc + x] = ei * qs;
		}
		__syncthreads();
		// Forward substitution, row after row: 4 lanes per column, each
		// summing the rows j ≡ sub (mod 4), combined in a fixed order.
		{
			const int x = tid >> 2, sub = tid & 3;
			for (int i = r; i < end; i++) {
				float part = 0.0f;
				for (int j = sub; j < i; j += 4) part = fmaf(A[(i - r) * ldr + j], Us[j * ldc + x], part);
				part += __shfl_xor_sync(0xffffffffu, part, 1);
				part += __shfl_xor_sync(0xffffffffu, part, 2);
				if (sub == 0) Us[i * ldc + x] += part;
				__syncwarp();
			}
		}
		__syncthreads();
		// Outputs: 4 partial sums over j ≡ sub (mod 4) combined as the
		// solve combines its lanes' (m_gdn_decode's order).
		for (int p = tid; p < seg * GDN_CB; p += GDN_NT) {
			const int i = r + p / GDN_CB, x = p % GDN_CB;
			float a[4];
#pragma unroll
			for (int sub = 0; sub < 4; sub++) {
				a[sub] = 0.0f;
				for (int j = sub; j <= i; j += 4) a[sub] = fmaf(Bq[(i - r) * ldr + j], Us[j * ldc + x], a[sub]);
			}
			const float o = Os[(i - r) * ldc + x] + ((a[0] + a[1]) + (a[2] + a[3]));
			if (x0 + x < Dv) st_act(out, (long long)(start + t + i - r) * vw + (long long)h * Dv + x0 + x, o);
		}
		t += seg;
		if (end < GDN_CHUNK) {
			r = end;
			continue;
		}
		// The chunk is full: fold it into S.
		for (int j = tid; j < GDN_CHUNK; j += GDN_NT) Ds[j] = (float)exp((double)(Gs[GDN_CHUNK - 1] - Gs[j]));
		__syncthreads();
		const float el = (float)exp((double)Gs[GDN_CHUNK - 1]);
		for (int p = tid; p < Dk * GDN_CB; p += GDN_NT) {
			const int d = p / GDN_CB, x = p % GDN_CB;
			float v = Ss[d * ldc + x] * el;
			for (int j = 0; j < GDN_CHUNK; j++) v = fmaf(Ds[j] * Ks[j * ldk + d], Us[j * ldc + x], v);
			Ss[d * ldc + x] = v;
		}
		flushed = true;
		r = 0;
	}
	__syncthreads();
	if (flushed || fresh)
		for (int i = tid; i < Dk * GDN_CB; i += GDN_NT) {
			int d = i / GDN_CB, x = i % GDN_CB;
			if (x0 + x < Dv) Sg[(long long)d * Dv + x0 + x] = Ss[d * ldc + x];
		}
	// The open chunk's new u rows (r is the number of open rows now).
	const int first = flushed ? 0 : rows0;
	for (int i = tid; i < (r - first) * GDN_CB; i += GDN_NT) {
		int j = first + i / GDN_CB, x = i % GDN_CB;
		if (x0 + x < Dv) Ug[((long long)j * Hv + h) * Dv + x0 + x] = Us[j * ldc + x];
	}
}

// m_gdn_commit: after m_gdn_chunk, store the open chunk's new normalised
// keys (value heads that are the first of their key head) and cumulative
// log decays. grid (Hv, sequences), block 32.
extern "C" __global__ void __launch_bounds__(32) m_gdn_commit(const act_t *qkv, const float *g, float *state, int layer, int layers,
								const int *seq_start, const int *seq_len, const int *seq_pos,
								const int *seq_slot, int C, int Hk, int Hv, int Dk, int Dv) {
	KT_GRID_DEP();
	extern __shared__ float sm[]; // [Dk]
	const int h = blockIdx.x, s = blockIdx.y, lane = threadIdx.x;
	const int rep = Hv / Hk, kh = h / rep;
	const int start = seq_start[s], n = seq_len[s], pos = seq_pos[s];
	const int rows0 = pos % GDN_CHUNK, rend = (pos + n) % GDN_CHUNK;
	if (rend == 0) return; // no open rows
	const bool crossed = rows0 + n >= GDN_CHUNK;
	const int first = crossed ? 0 : rows0; // first new row of the open chunk
	const int t0 = n - (rend - first);     // its token index in the span
	const long long per = (long long)Hv * Dk * Dv + (long long)GDN_CHUNK * Hk * Dk + (long long)GDN_CHUNK * Hv * Dv + GDN_CHUNK * Hv;
	float *base = state + ((long long)seq_slot[s] * layers + layer) * per;
	float *Kg = base + (long long)Hv * Dk * Dv;
	float *Gg = Kg + (long long)GDN_CHUNK * Hk * Dk + (long long)GDN_CHUNK * Hv * Dv;
	if (h % rep == 0) {
		const long long koff = (long long)Hk * Dk + (long long)kh * Dk;
		for (int i = first; i < rend; i++) {
			gdn_norm_row(qkv, (long long)(start + t0 + i - first) * C + koff, sm, Dk, 1.0f, lane);
			for (int d = lane; d < Dk; d += 32) Kg[((long long)i * Hk + kh) * Dk + d] = sm[d];
			__syncwarp();
		}
	}
	if (lane == 0) {
		// The same recurrence as m_gdn_chunk: a chunk's first row starts
		// afresh, later rows add to the previous one.
		float acc = first > 0 ? Gg[(long long)(first - 1) * Hv + h] : 0.0f;
		for (int i = first; i < rend; i++) {
			const float gv = g[(long long)(start + t0 + i - first) * Hv + h];
			acc = i == 0 ? gv : gv + acc;
			Gg[(long long)i * Hv + h] = acc;
		}
	}
}

// m_gdn_decode: m_gdn_chunk followed by m_gdn_commit for a step whose
// every sequence has one row (a decode step), with the same arithmetic,
// so a decode step and a one-row prefill piece agree bit for bit. The row
// is row i = pos mod 64 of the open chunk; only it is new, so one grid
// reads the earlier rows' K, U, G and writes row i's (no commit kernel).
// Block (h, column block, sequence) of GDN_DNT threads:
//   - thread (warp w, lane x) holds S[d][x0+x] for d ≡ w (mod 8) in
//     registers (Dk ≤ 128): S is read once, written only when the row
//     completes the chunk (the flush) or the sequence is fresh;
//   - kᵀS and qᵀS: warp w's partial sums over its keys, combined as
//     gdn_dot combines them;
//   - k_i·k_j and q_i·k_j for j ≤ i: 8 lanes per row j (gdn_dot's order);
//   - the solve and the output: 4 lanes per column as in m_gdn_chunk.
// grid (Hv, ceil(Dv/GDN_CB), sequences), block GDN_DNT, dynamic smem
// gdnDecodeSmem (Go).
#define GDN_DNT 256
extern "C" __global__ void __launch_bounds__(GDN_DNT) m_gdn_decode(act_t *out, const act_t *qkv, const float *g, const float *beta,
								     float *state, int layer, int layers, const int *seq_start,
								     const int *seq_pos, const int *seq_slot, int C, int Hk, int Hv,
								     int Dk, int Dv) {
	KT_GRID_DEP();
	extern __shared__ float sm[];
	const int ldc = GDN_CB + 1;
	float *qn = sm, *kn = qn + Dk;          // this row's normalised (scaled) q and k
	float *Us = kn + Dk;                    // [64][ldc] u rows, this block's columns
	float *Gs = Us + GDN_CHUNK * ldc;       // [64] cumulative log decay
	float *A = Gs + GDN_CHUNK;              // [64] −β(k_i·k_j)e^{G_i−G_j}, j < i
	float *Bq = A + GDN_CHUNK;              // [64] (q_i·k_j)e^{G_i−G_j}, j ≤ i
	float *Ds = Bq + GDN_CHUNK;             // [64] e^{G_63 − G_j} at a flush
	float *Rk = Ds + GDN_CHUNK;             // [8][GDN_CB] partial sums of kᵀS
	float *Rq = Rk + 8 * GDN_CB;            // [8][GDN_CB] partial sums of qᵀS

	const int h = blockIdx.x, s = blockIdx.z, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int x0 = blockIdx.y * GDN_CB, col = x0 + lane;
	const int rep = Hv / Hk, kh = h / rep;
	const int row = seq_start[s], pos = seq_pos[s], i = pos % GDN_CHUNK;
	const bool fresh = pos == 0;
	const long long per = (long long)Hv * Dk * Dv + (long long)GDN_CHUNK * Hk * Dk + (long long)GDN_CHUNK * Hv * Dv + GDN_CHUNK * Hv;
	float *base = state + ((long long)seq_slot[s] * layers + layer) * per;
	float *Sg = base + (long long)h * Dk * Dv;
	float *Kg = base + (long long)Hv * Dk * Dv;
	float *Ug = Kg + (long long)GDN_CHUNK * Hk * Dk;
	float *Gg = Ug + (long long)GDN_CHUNK * Hv * Dv;
	const float scale = (float)(1.0 / sqrt((double)Dk));
	const long long roff = (long long)row * C;

	float Sr[16]; // S[warp + 8m][col]
#pragma unroll
	for (int m = 0; m < 16; m++) {
		const int d = warp + 8 * m;
		Sr[m] = (!fresh && d < Dk && col < Dv) ? Sg[(long long)d * Dv + col] : 0.0f;
	}
	for (int p = tid; p < i * GDN_CB; p += GDN_DNT) {
		const int j = p / GDN_CB, x = p % GDN_CB;
		Us[j * ldc + x] = x0 + x < Dv ? Ug[((long long)j * Hv + h) * Dv + x0 + x] : 0.0f;
	}
	for (int j = tid; j < i; j += GDN_DNT) Gs[j] = Gg[(long long)j * Hv + h];
	const long long gi = (long long)row * Hv + h;
	const float bt = beta[gi];
	const float Gi = i == 0 ? g[gi] : g[gi] + Gg[(long long)(i - 1) * Hv + h];
	if (warp == 0) gdn_norm_row(qkv, roff + (long long)kh * Dk, qn, Dk, scale, lane);
	else if (warp == 1) gdn_norm_row(qkv, roff + (long long)Hk * Dk + (long long)kh * Dk, kn, Dk, 1.0f, lane);
	else if (tid == 64) Gs[i] = Gi;
	__syncthreads();

	// Warp w's partial sums of kᵀS and qᵀS.
	float pk = 0.0f, pq = 0.0f;
#pragma unroll
	for (int m = 0; m < 16; m++) {
		const int d = warp + 8 * m;
		if (d < Dk) {
			pk = fmaf(kn[d], Sr[m], pk);
			pq = fmaf(qn[d], Sr[m], pq);
		}
	}
	Rk[warp * GDN_CB + lane] = pk;
	Rq[warp * GDN_CB + lane] = pq;
	// Dot products with the chunk's keys (row i's own key at j = i), decays folded in.
	const int p8 = tid & 7;
	for (int j0 = 0; j0 <= i; j0 += GDN_DNT / 8) {
		const int j = j0 + (tid >> 3);
		float kk = 0.0f, qk = 0.0f;
		if (j <= i) {
			const float *kj = j < i ? Kg + ((long long)j * Hk + kh) * Dk : kn;
			for (int d = p8; d < Dk; d += 8) {
				const float kv = kj[d];
				kk = fmaf(kn[d], kv, kk);
				qk = fmaf(qn[d], kv, qk);
			}
		}
#pragma unroll
		for (int o = 1; o < 8; o <<= 1) {
			kk += __shfl_xor_sync(0xffffffffu, kk, o);
			qk += __shfl_xor_sync(0xffffffffu, qk, o);
		}
		if (p8 == 0 && j <= i) {
			if (j == i) {
				Bq[j] = qk;
			} else {
				const float dec = (float)exp((double)(Gi - Gs[j]));
				A[j] = (-bt * kk) * dec;
				Bq[j] = qk * dec;
			}
		}
	}
	__syncthreads();

	// u_i and o_i, 4 lanes per column (m_gdn_chunk's solve and output).
	if (tid < 4 * GDN_CB) {
		const int x = tid >> 2, sub = tid & 3;
		float rk[8], rq[8];
#pragma unroll
		for (int p = 0; p < 8; p++) {
			rk[p] = Rk[p * GDN_CB + x];
			rq[p] = Rq[p * GDN_CB + x];
		}
		const float ei = (float)exp((double)Gi);
		const float v = x0 + x < Dv ? ld_act(qkv, roff + 2LL * Hk * Dk + (long long)h * Dv + x0 + x) : 0.0f;
		float u = bt * fmaf(-ei, gdn_sum8(rk), v);
		const float os = ei * gdn_sum8(rq);
		float pa = 0.0f, pb = 0.0f;
		for (int j = sub; j < i; j += 4) {
			const float uj = Us[j * ldc + x];
			pa = fmaf(A[j], uj, pa);
			pb = fmaf(Bq[j], uj, pb);
		}
		pa += __shfl_xor_sync(0xffffffffu, pa, 1);
		pa += __shfl_xor_sync(0xffffffffu, pa, 2);
		u += pa;
		if (sub == (i & 3)) pb = fmaf(Bq[i], u, pb);
		pb += __shfl_xor_sync(0xffffffffu, pb, 1);
		pb += __shfl_xor_sync(0xffffffffu, pb, 2);
		if (sub == 0) {
			Us[i * ldc + x] = u;
			if (x0 + x < Dv) {
				st_act(out, (long long)row * Hv * Dv + (long long)h * Dv + x0 + x, os + pb);
				if (i < GDN_CHUNK - 1) Ug[((long long)i * Hv + h) * Dv + x0 + x] = u;
			}
		}
	}
	if (i < GDN_CHUNK - 1) {
		// Commit row i's key (first value head of its key head) and decay.
		if (blockIdx.y == 0) {
			if (h % rep == 0)
				for (int d = tid; d < Dk; d += GDN_DNT) Kg[((long long)i * Hk + kh) * Dk + d] = kn[d];
			if (tid == 0) Gg[(long long)i * Hv + h] = Gi;
		}
		if (fresh && col < Dv)
#pragma unroll
			for (int m = 0; m < 16; m++) {
				const int d = warp + 8 * m;
				if (d < Dk) Sg[(long long)d * Dv + col] = 0.0f;
			}
		return;
	}
	// The chunk is full: fold it into S.
	for (int j = tid; j < GDN_CHUNK; j += GDN_DNT) Ds[j] = (float)exp((double)(Gi - Gs[j]));
	__syncthreads();
	const float el = (float)exp((double)Gi);
#pragma unroll
	for (int m = 0; m < 16; m++) Sr[m] *= el;
	for (int j = 0; j < GDN_CHUNK; j++) { // rows outermost: 16 independent sums per thread
		const float *kj = j < GDN_CHUNK - 1 ? Kg + ((long long)j * Hk + kh) * Dk : kn;
		const float dj = Ds[j], uj = Us[j * ldc + lane];
#pragma unroll
		for (int m = 0; m < 16; m++) {
			const int d = warp + 8 * m;
			if (d < Dk) Sr[m] = fmaf(dj * kj[d], uj, Sr[m]);
		}
	}
	if (col < Dv)
#pragma unroll
		for (int m = 0; m < 16; m++) {
			const int d = warp + 8 * m;
			if (d < Dk) Sg[(long long)d * Dv + col] = Sr[m];
		}
}

// m_split_bf16 / m_split_f16: the activations x as the sum of two 16-bit
// matrices stacked by rows, out[0..n) = hi = round(x), out[n..2n) = lo =
// round(x - hi), so one GEMM of twice the rows gives x·Wᵀ with ~16 bits
// more precision than x rounded once (weights read once).
extern "C" __global__ void m_split_bf16(bf16 *out, const float *in, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	split_bf16(in[i], out + i, out + n + i);
}
extern "C" __global__ void m_split_f16(unsigned short *out, const float *in, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	float x = in[i];
	unsigned short hi = f2h(x);
	out[i] = hi;
	out[n + i] = f2h(x - h2f(hi));
}

// m_add_halves: out[i] = d[i] + d[n + i] (the hi and lo GEMM rows).
extern "C" __global__ void m_add_halves(act_t *out, const float *d, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) st_act(out, i, d[i] + d[n + i]);
}
