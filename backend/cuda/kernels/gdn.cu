// Gated delta rule (Qwen3-Next / Qwen3.5 linear attention).
//
// gdn_gates_f32: g = -exp(A_log) * softplus(a + dt_bias) (float32) and
// beta = bf16(sigmoid(b)), from the bf16 projections a, b [T, Hv] (row
// stride ab_stride). grid T, block 32..256.
extern "C" __global__ void gdn_gates_f32(float *g, float *beta, const bf16 *a, const bf16 *b, long long a_stride,
					 long long b_stride, const float *A_log, const float *dt_bias, int Hv) {
	KT_GRID_DEP();
	int t = blockIdx.x;
	for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
		float x = bf2f(a[(long long)t * a_stride + h]) + dt_bias[h];
		float sp = x > 20.0f ? x : log1pf(expf(x));
		g[(long long)t * Hv + h] = -expf(A_log[h]) * sp;
		beta[(long long)t * Hv + h] = rbf(sigmoid_f(bf2f(b[(long long)t * b_stride + h])));
	}
}

// gdn_recurrent_bf16 runs the recurrence token by token over each
// sequence's new tokens (the whole chunk for prefill, one token for decode),
// starting from and updating the float32 state S [slots, Hv, Dk, Dv]:
//   q, k <- l2norm(q), l2norm(k) (in bf16, as HF's l2norm on bf16 inputs)
//   S <- S * exp(g);  delta = (v - S^T k) * beta;  S <- S + k delta^T
//   o = S^T (q / sqrt(Dk))
// q and k heads are shared by Hv/Hk value heads. Thread j of a block owns
// column j of S (DK floats in registers), so no reductions are needed.
// grid (Hv, Dv/32, B), block 32. DK = 128.
#define GDN_DK 128
extern "C" __global__ void __launch_bounds__(32) gdn_recurrent_bf16(
	bf16 *out, long long out_stride, const bf16 *q, const bf16 *k, const bf16 *v, long long qkv_stride,
	const float *g, const float *beta, float *state, const int *cu, const int *slots, int Hk, int Hv, int Dv) {
	KT_GRID_DEP();
	const int h = blockIdx.x, s = blockIdx.z, lane = threadIdx.x;
	const int j = blockIdx.y * 32 + lane;
	const int hk = h / (Hv / Hk);
	const int t0 = cu[s], n = cu[s + 1] - t0;
	__shared__ float qs[GDN_DK], ks[GDN_DK];
	float S[GDN_DK];
	float *st = state + ((long long)slots[s] * Hv + h) * GDN_DK * Dv;
#pragma unroll
	for (int i = 0; i < GDN_DK; i++) S[i] = st[(long long)i * Dv + j];
	const float scale = rsqrtf((float)GDN_DK);
	for (int tt = 0; tt < n; tt++) {
		long long row = (long long)(t0 + tt) * qkv_stride;
		float qv[GDN_DK / 32], kv[GDN_DK / 32], sq = 0.0f, sk = 0.0f;
#pragma unroll
		for (int i = 0; i < GDN_DK / 32; i++) {
			qv[i] = bf2f(q[row + hk * GDN_DK + lane + 32 * i]);
			kv[i] = bf2f(k[row + hk * GDN_DK + lane + 32 * i]);
			sq += rbf(qv[i] * qv[i]);
			sk += rbf(kv[i] * kv[i]);
		}
		sq = warp_sum(sq);
		sk = warp_sum(sk);
		float rq = rbf(rsqrtf(rbf(rbf(sq) + 1e-6f))), rk = rbf(rsqrtf(rbf(rbf(sk) + 1e-6f)));
		__syncwarp();
#pragma unroll
		for (int i = 0; i < GDN_DK / 32; i++) {
			qs[lane + 32 * i] = rbf(qv[i] * rq) * scale;
			ks[lane + 32 * i] = rbf(kv[i] * rk);
		}
		__syncwarp();
		float decay = expf(g[(long long)(t0 + tt) * Hv + h]);
		float bt = beta[(long long)(t0 + tt) * Hv + h];
		float vj = bf2f(v[row + (long long)h * Dv + j]);
		float mem = 0.0f;
#pragma unroll
		for (int i = 0; i < GDN_DK; i++) {
			S[i] *= decay;
			mem += S[i] * ks[i];
		}
		float delta = (vj - mem) * bt;
		float o = 0.0f;
#pragma unroll
		for (int i = 0; i < GDN_DK; i++) {
			S[i] += ks[i] * delta;
			o += S[i] * qs[i];
		}
		out[(long long)(t0 + tt) * out_stride + (long long)h * Dv + j] = f2bf(o);
	}
#pragma unroll
	for (int i = 0; i < GDN_DK; i++) st[(long long)i * Dv + j] = S[i];
}
