// norm.cu: the RMS norms of the op set (Backend.RMSNorm, Backend.AddRMSNorm,
// Backend.GatedRMSNorm): the general block-per-row kernels and the
// one-pass float4 forms for aligned rows.

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
