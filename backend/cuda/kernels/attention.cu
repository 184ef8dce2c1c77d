// attention.cu: the op set's KV cache store and the general attention
// kernel (Backend.Attention; attnf32.cu holds the split-K kernels it
// takes for head dims 128 and 256).

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
