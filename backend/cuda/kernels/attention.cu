// Attention over a paged KV cache.
// Cache layout: K and V each [pages, page_size, n_kv, D] bf16. A sequence's
// token i lives in page block_table[seq * max_pages + i / page_size] at
// offset i % page_size. GQA: query head h reads kv head h / (Hq / Hkv).

// kv_store_bf16 writes new tokens' K and V into their cache slots
// (slot = page * page_size + offset). grid T, block 256.
extern "C" __global__ void kv_store_bf16(bf16 *kc, bf16 *vc, const bf16 *k, const bf16 *v, const int *slots,
					 int n_kv, int D, long long k_stride, long long v_stride) {
	KT_GRID_DEP();
	int t = blockIdx.x;
	long long dst = (long long)slots[t] * n_kv * D;
	const bf16 *kr = k + (long long)t * k_stride, *vr = v + (long long)t * v_stride;
	for (int i = threadIdx.x; i < n_kv * D; i += blockDim.x) {
		kc[dst + i] = kr[i];
		vc[dst + i] = vr[i];
	}
}

// attn_decode: one new token per sequence. grid (B, Hkv, splits), block
// 128 (4 warps). Each warp takes tiles of 32 tokens, lane j scoring token
// j of the tile against all G query heads of the kv head (scores need no
// shuffles); the softmax statistics are then updated once per tile and
// head, the probabilities go through shared memory, and for P·V lane l
// owns dims [l*PER, (l+1)*PER) and reads V rows coalesced. The 4 warps
// merge at the end; with splits > 1 each split writes an unnormalised
// partial (acc, max, sum) and attn_decode_reduce merges them. PER = D/32
// is a template constant so accumulators stay in registers; a kv head may
// serve up to 64/PER query heads (16 for D=128, 8 for D=256).
template <int PER>
__device__ void attn_decode(bf16 *out, const bf16 *q, long long q_stride, const bf16 *kc, const bf16 *vc,
			    const int *block_table, int max_pages, const int *seq_lens, int page_size, int Hq, int Hkv,
			    float scale, int splits, float *part_o, float *part_ml) {
	constexpr int D = PER * 32, MAXG = 64 / PER;
	const int b = blockIdx.x, hk = blockIdx.y, sp = blockIdx.z;
	const int G = Hq / Hkv, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int len = seq_lens[b];
	const int chunk = (len + splits - 1) / splits;
	const int t0 = sp * chunk, t1 = min(len, t0 + chunk);
	extern __shared__ float sm[];
	float *qs = sm;                 // [G][D]
	float *ps = sm + G * D;         // [4 warps][MAXG][32]
	for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
		int g = i / D, d = i % D;
		qs[i] = bf2f(q[(long long)b * q_stride + (long long)(hk * G + g) * D + d]) * scale;
	}
	__syncthreads();
	float m[MAXG], l[MAXG], acc[MAXG * PER];
#pragma unroll
	for (int g = 0; g < MAXG; g++) {
		m[g] = -KT_INF;
		l[g] = 0.0f;
#pragma unroll
		for (int i = 0; i < PER; i++) acc[g * PER + i] = 0.0f;
	}
	const int *bt = block_table + (long long)b * max_pages;
	const long long rowstride = (long long)Hkv * D;
	float *pw = ps + warp * MAXG * 32;
	for (int base = t0 + warp * 32; base < t1; base += 4 * 32) {
		const int t = base + lane;
		const bool valid = t < t1;
		float s[MAXG];
#pragma unroll
		for (int g = 0; g < MAXG; g++) s[g] = 0.0f;
		if (valid) {
			const bf16 *kr = kc + ((long long)bt[t / page_size] * page_size + t % page_size) * rowstride + (long long)hk * D;
#pragma unroll 4
			for (int c = 0; c < D; c += 8) {
				float kf[8];
				load8(kr + c, kf);
#pragma unroll
				for (int g = 0; g < MAXG; g++) {
					if (g < G) {
						const float4 q0 = *(const float4 *)(qs + g * D + c);
						const float4 q1 = *(const float4 *)(qs + g * D + c + 4);
						s[g] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] +
							q1.x * kf[4] + q1.y * kf[5] + q1.z * kf[6] + q1.w * kf[7];
					}
				}
			}
		}
		// Online softmax, once per tile and head.
#pragma unroll
		for (int g = 0; g < MAXG; g++) {
			if (g < G) {
				float sg = valid ? s[g] : -KT_INF;
				float mn = fmaxf(m[g], warp_max(sg));
				float corr = expf(m[g] - mn); // m = -inf the first time: 0
				float p = valid ? expf(sg - mn) : 0.0f;
				l[g] = l[g] * corr + warp_sum(p);
				m[g] = mn;
				pw[g * 32 + lane] = p;
#pragma unroll
				for (int i = 0; i < PER; i++) acc[g * PER + i] *= corr;
			}
		}
		__syncwarp();
		const int n = min(32, t1 - base);
		for (int j = 0; j < n; j++) {
			const int tj = base + j;
			const bf16 *vr = vc + ((long long)bt[tj / page_size] * page_size + tj % page_size) * rowstride + (long long)hk * D + lane * PER;
			float vf[8];
			if (PER == 8) {
				load8(vr, vf);
			} else {
				uint2 vu = *(const uint2 *)vr;
				vf[0] = __uint_as_float(vu.x << 16); vf[1] = __uint_as_float(vu.x & 0xffff0000u);
				vf[2] = __uint_as_float(vu.y << 16); vf[3] = __uint_as_float(vu.y & 0xffff0000u);
			}
#pragma unroll
			for (int g = 0; g < MAXG; g++) {
				if (g < G) {
					float p = pw[g * 32 + j];
#pragma unroll
					for (int i = 0; i < PER; i++) acc[g * PER + i] += p * vf[i];
				}
			}
		}
		__syncwarp();
	}
	// Merge the 4 warps through shared memory.
	__syncthreads();
	float *wm = sm;            // [4][MAXG]
	float *wl = sm + 4 * MAXG; // [4][MAXG]
	float *wa = sm + 8 * MAXG; // [4][G*D]
	if (lane == 0) {
#pragma unroll
		for (int g = 0; g < MAXG; g++) { wm[warp * MAXG + g] = m[g]; wl[warp * MAXG + g] = l[g]; }
	}
#pragma unroll
	for (int g = 0; g < MAXG; g++) {
		if (g < G) {
#pragma unroll
			for (int i = 0; i < PER; i++) wa[warp * G * D + g * D + lane * PER + i] = acc[g * PER + i];
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
		int g = i / D, d = i % D;
		float M = -KT_INF;
		for (int w = 0; w < 4; w++) M = fmaxf(M, wm[w * MAXG + g]);
		float L = 0.0f, A = 0.0f;
		if (M != -KT_INF) {
			for (int w = 0; w < 4; w++) {
				float e = expf(wm[w * MAXG + g] - M);
				L += wl[w * MAXG + g] * e;
				A += wa[w * G * D + i] * e;
			}
		}
		int h = hk * G + g;
		if (splits == 1) {
			out[((long long)b * Hq + h) * D + d] = f2bf(L > 0.0f ? A / L : 0.0f);
		} else {
			long long pi = ((long long)b * Hq + h) * splits + sp;
			part_o[pi * D + d] = A;
			if (d == 0) { part_ml[pi * 2] = M; part_ml[pi * 2 + 1] = L; }
		}
	}
}

extern "C" __global__ void __launch_bounds__(128) attn_decode_d128_bf16(
	bf16 *out, const bf16 *q, long long q_stride, const bf16 *kc, const bf16 *vc, const int *block_table,
	int max_pages, const int *seq_lens, int page_size, int Hq, int Hkv, float scale, int splits, float *part_o,
	float *part_ml) {
	KT_GRID_DEP();
	attn_decode<4>(out, q, q_stride, kc, vc, block_table, max_pages, seq_lens, page_size, Hq, Hkv, scale, splits, part_o, part_ml);
}

extern "C" __global__ void __launch_bounds__(128) attn_decode_d256_bf16(
	bf16 *out, const bf16 *q, long long q_stride, const bf16 *kc, const bf16 *vc, const int *block_table,
	int max_pages, const int *seq_lens, int page_size, int Hq, int Hkv, float scale, int splits, float *part_o,
	float *part_ml) {
	KT_GRID_DEP();
	attn_decode<8>(out, q, q_stride, kc, vc, block_table, max_pages, seq_lens, page_size, Hq, Hkv, scale, splits, part_o, part_ml);
}

// attn_decode_reduce merges split partials. grid (B, Hq), block D.
extern "C" __global__ void attn_decode_reduce(bf16 *out, const float *part_o, const float *part_ml, int Hq, int D,
					      int splits) {
	KT_GRID_DEP();
	int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
	if (d >= D) return;
	long long base = ((long long)b * Hq + h) * splits;
	float M = -KT_INF;
	for (int s = 0; s < splits; s++) M = fmaxf(M, part_ml[(base + s) * 2]);
	float L = 0.0f, A = 0.0f;
	if (M != -KT_INF) {
		for (int s = 0; s < splits; s++) {
			float e = expf(part_ml[(base + s) * 2] - M);
			L += part_ml[(base + s) * 2 + 1] * e;
			A += part_o[(base + s) * D + d] * e;
		}
	}
	out[((long long)b * Hq + h) * D + d] = f2bf(L > 0.0f ? A / L : 0.0f);
}

// attn_prefill_bf16: causal attention for chunks of new tokens whose K/V
// are already in the cache (after kv_store). Sequence s has q_len =
// cu_q[s+1]-cu_q[s] new tokens at the end of ctx_len[s] cached tokens; its
// query i sits at position ctx_len - q_len + i and sees keys 0..position.
// Flash style: K/V tiles of 32 tokens in shared memory, an online softmax
// per query; one warp per query row, 8 rows per block.
// grid (ceil(max_q_len / 8), Hq, B), block 256.
#define PF_ROWS 8
#define PF_TILE 32
extern "C" __global__ void __launch_bounds__(256) attn_prefill_bf16(
	bf16 *out, long long out_stride, const bf16 *q, long long q_stride, const bf16 *kc, const bf16 *vc,
	const int *block_table, int max_pages, const int *cu_q, const int *ctx_lens, int page_size, int Hq, int Hkv,
	int D, float scale) {
	KT_GRID_DEP();
	const int s = blockIdx.z, h = blockIdx.y, G = Hq / Hkv, hk = h / G;
	const int q0 = cu_q[s], q_len = cu_q[s + 1] - q0, ctx = ctx_lens[s];
	const int row0 = blockIdx.x * PF_ROWS;
	if (row0 >= q_len) return;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int per = D / 32;
	const int DP = D + 2; // padded row (odd word stride: no bank conflicts)
	extern __shared__ float smf[];
	float *qs = smf;                                  // [8][D]
	bf16 *ks = (bf16 *)(smf + PF_ROWS * D);           // [32][DP]
	bf16 *vs = ks + PF_TILE * DP;                     // [32][DP]
	const int row = row0 + warp;
	const bool active = row < q_len;
	const int qpos = ctx - q_len + row; // absolute position of this query
	for (int i = lane; i < D; i += 32)
		qs[warp * D + i] = active ? bf2f(q[(long long)(q0 + row) * q_stride + (long long)h * D + i]) * scale : 0.0f;
	const int last = min(ctx - q_len + min(row0 + PF_ROWS, q_len) - 1, ctx - 1); // last key any row needs
	float m = -KT_INF, l = 0.0f, acc[8];
#pragma unroll
	for (int i = 0; i < 8; i++) acc[i] = 0.0f;
	const int *bt = block_table + (long long)s * max_pages;
	const long long rowstride = (long long)Hkv * D;
	for (int k0 = 0; k0 <= last; k0 += PF_TILE) {
		__syncthreads();
		// Load the tile: 32 rows of D for K and V.
		for (int i = threadIdx.x; i < PF_TILE * (D / 2); i += blockDim.x) {
			int r = i / (D / 2), c = (i % (D / 2)) * 2, t = k0 + r;
			u32 kw = 0, vw = 0;
			if (t <= last) {
				long long base = ((long long)bt[t / page_size] * page_size + t % page_size) * rowstride + (long long)hk * D + c;
				kw = *(const u32 *)(kc + base);
				vw = *(const u32 *)(vc + base);
			}
			*(u32 *)(ks + r * DP + c) = kw;
			*(u32 *)(vs + r * DP + c) = vw;
		}
		__syncthreads();
		// Lane j scores key k0 + j. Every warp runs every step (inactive
		// rows see only masked keys) so warp and block barriers stay uniform.
		int t = k0 + lane;
		float sc = -KT_INF;
		if (active && t <= qpos) {
			float a = 0.0f;
			const float *qr = qs + warp * D;
			const bf16 *kr = ks + lane * DP;
			for (int d = 0; d < D; d += 2) {
				u32 w = *(const u32 *)(kr + d);
				a += qr[d] * __uint_as_float(w << 16) + qr[d + 1] * __uint_as_float(w & 0xffff0000u);
			}
			sc = a;
		}
		float mt = warp_max(sc);
		float mn = fmaxf(m, mt);
		float corr = mn == -KT_INF ? 1.0f : expf(m - mn);
		float p = sc == -KT_INF ? 0.0f : expf(sc - mn);
		l = l * corr + warp_sum(p);
		m = mn;
#pragma unroll
		for (int i = 0; i < 8; i++) acc[i] *= corr;
		for (int j = 0; j < PF_TILE; j++) {
			float pj = __shfl_sync(0xffffffffu, p, j);
			const bf16 *vr = vs + j * DP + lane * per;
#pragma unroll
			for (int i = 0; i < 8; i++)
				if (i < per) acc[i] += pj * bf2f(vr[i]);
		}
	}
	if (!active) return;
	bf16 *orow = out + (long long)(q0 + row) * out_stride + (long long)h * D + lane * per;
#pragma unroll
	for (int i = 0; i < 8; i++)
		if (i < per) orow[i] = f2bf(l > 0.0f ? acc[i] / l : 0.0f);
}
