// mla.cu: multi-head latent attention (Backend.MLAttention in mla.go),
// DeepSeek-V3's attention over a paged latent cache of float32 entries
// [latent (R) | rotated rope key (rope)], W = R + rope wide.
//
// A step runs, in order:
//   mla_store     each row's cache entry: the latent RMS-normed times the
//                 kv_a_layernorm weight, the rope key rotated;
// then per chunk of rows (the host bounds the chunk so that the scratch
// buffers stay small):
//   mla_q_rope    the rope part of every head's query rotated into the
//                 latent query qc [rows, heads, W] after its first R values;
//   mla_q_absorb  qc's first R values: the query's nope part through the
//                 head's key rows of kv_b_proj (Wkᵀ·q_nope);
//   mla_attn      per row and head: softmax(qc·cacheᵀ·scale) over the row's
//                 positions 0..pos, the weighted sum of the cached latents;
//                 S splits of the positions, each block serving hg heads
//                 (one warp each) so a cache tile is read once for them;
//   mla_merge     the S partials of each (row, head) combined (S > 1);
//   mla_v_up      the head's value rows of kv_b_proj applied to the
//                 attended latent: the output [rows, heads, vd].
// kv_b_proj is [heads·(nope+vd), R]: per head nope key rows, then vd value
// rows; it is float (WT_F32, WT_BF16, WT_F16, read as stored) or
// block-scaled FP8 (MLA_FP8: codes with float32 block scales
// [ceil(O/bn), sc]), each element decoded as the CPU backend decodes it.
// The rotary angle of pair i at position p is p·invf[i] in float32, its
// cos and sin in float64, each times the attention factor af, as
// backend/cpu's ropeAngles; interleaved rope parts are read
// (x0, x2, ...) and (x1, x3, ...).

// MLA_EMU_BEGIN (testdata/gdnemu/run.sh compiles from here on for the host)

#define MLA_FP8 3 // kv_b_proj weight code beside WT_F32, WT_BF16, WT_F16
#define MLA_TP 32 // positions per tile of mla_attn (one per lane)
#define MLA_RB 8  // rows per block of mla_q_absorb and mla_v_up

// mla_fp8: the value of E4M3 code q (fp8.cu's decoding: sign to bit 31,
// exponent and mantissa to bits 20..26, times 2^120).
__device__ __forceinline__ float mla_fp8(unsigned char q) {
	const u32 w = q;
	return __uint_as_float(((w << 24) & 0x80000000u) | ((w << 20) & 0x07f00000u)) * 0x1p120f;
}

// mla_w: element (r, c) of the [.., K] weight w of code dt (ws, bn, bk, sc:
// an FP8 weight's block scales).
__device__ __forceinline__ float mla_w(const void *w, const float *ws, int dt, long long r, int c, int K, int bn, int bk, int sc) {
	if (dt == MLA_FP8) return mla_fp8(((const unsigned char *)w)[r * K + c]) * ws[(r / bn) * sc + c / bk];
	return ldw(w, r * K + c, dt);
}

// mla_angle: cos and sin of pair i's angle at position p, times af.
__device__ __forceinline__ void mla_angle(int p, float f, float af, float *c, float *s) {
	const float a = (float)p * f;
	*c = (float)cos((double)a) * af;
	*s = (float)sin((double)a) * af;
}

// mla_rope_pair: pair i of the rope part x (2·half values) rotated by the
// rotate-half rule into dst[i] and dst[i + half].
__device__ __forceinline__ void mla_rope_pair(float *dst, const float *x, int i, int half, int inter, float c, float s) {
	const float x1 = inter ? x[2 * i] : x[i];
	const float x2 = inter ? x[2 * i + 1] : x[i + half];
	dst[i] = x1 * c - x2 * s;
	dst[i + half] = x2 * c + x1 * s;
}

// mla_store: row t's cache entry at position pos[t] of its sequence's
// pages: kv[t, :R] RMS-normed (the float64 reciprocal square root of the
// float32 mean square plus eps) times the norm weight nw (code nwdt), then
// kv[t, R:W] rotated. grid n, block 128.
extern "C" __global__ void __launch_bounds__(128) mla_store(float *cache, const act_t *kv, const void *nw, int nwdt, const float *invf,
							  const int *pos, const int *rowseq, const int *page_off, const int *pages,
							  int page_size, int R, int rope, float eps, float af, int inter) {
	KT_GRID_DEP();
	__shared__ float scratch[32];
	const int t = blockIdx.x, W = R + rope, half = rope / 2, p = pos[t];
	const act_t *src = kv + (long long)t * W;
	float *dst = cache + ((long long)pages[page_off[rowseq[t]] + p / page_size] * page_size + p % page_size) * W;
	float ss = 0.0f;
	for (int c = threadIdx.x; c < R; c += blockDim.x) {
		const float v = ld_act(src, c);
		ss += v * v;
	}
	ss = block_sum(ss, scratch);
	const float inv = (float)(1.0 / sqrt((double)(ss / (float)R + eps)));
	for (int c = threadIdx.x; c < R; c += blockDim.x) dst[c] = ldw(nw, c, nwdt) * (ld_act(src, c) * inv);
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float cs, sn;
		mla_angle(p, invf[i], af, &cs, &sn);
		mla_rope_pair(dst + R, src + R, i, half, inter, cs, sn);
	}
}

// mla_q_rope: the rope part of head h's query of row t (q is
// [n, heads, nope + rope]) rotated into qc[t, h, R:R+rope]. grid (n, heads),
// block 32.
extern "C" __global__ void mla_q_rope(float *qc, const act_t *q, const float *invf, const int *pos, int heads, int nope, int rope, int R,
				      float af, int inter) {
	KT_GRID_DEP();
	const int t = blockIdx.x, h = blockIdx.y, half = rope / 2;
	const act_t *x = q + ((long long)t * heads + h) * (nope + rope) + nope;
	float *dst = qc + ((long long)t * heads + h) * (R + rope) + R;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float cs, sn;
		mla_angle(pos[t], invf[i], af, &cs, &sn);
		mla_rope_pair(dst, x, i, half, inter, cs, sn);
	}
}

// mla_q_absorb: qc[t, h, c] = Σ_d q[t, h, d]·w[h·(nope+vd) + d, c] for
// c < R, summed over d in order (the CPU's order). A block takes 128
// latent columns of head h for MLA_RB rows, the rows' nope values in
// shared memory (MLA_RB·nope floats), each weight element read once for
// the rows. grid (ceil(R/128), heads, ceil(n/MLA_RB)), block 128.
extern "C" __global__ void __launch_bounds__(128) mla_q_absorb(float *qc, const act_t *q, const void *w, const float *ws, int wdt, int bn,
							     int bk, int sc, int heads, int nope, int rope, int vd, int R, int n) {
	KT_GRID_DEP();
	extern __shared__ float mlasm[];
	const int h = blockIdx.y, r0 = blockIdx.z * MLA_RB, rows = min(MLA_RB, n - r0), c = blockIdx.x * 128 + threadIdx.x;
	for (int i = threadIdx.x; i < rows * nope; i += blockDim.x) {
		const int r = i / nope, d = i % nope;
		mlasm[i] = ld_act(q, ((long long)(r0 + r) * heads + h) * (nope + rope) + d);
	}
	__syncthreads();
	if (c >= R) return;
	float acc[MLA_RB];
#pragma unroll
	for (int i = 0; i < MLA_RB; i++) acc[i] = 0.0f;
	const long long wr = (long long)h * (nope + vd);
	for (int d = 0; d < nope; d++) {
		const float x = mla_w(w, ws, wdt, wr + d, c, R, bn, bk, sc);
#pragma unroll
		for (int i = 0; i < MLA_RB; i++)
			if (i < rows) acc[i] += mlasm[i * nope + d] * x;
	}
	for (int i = 0; i < rows; i++) qc[((long long)(r0 + i) * heads + h) * (R + rope) + c] = acc[i];
}

// mla_attn: for row t and the hg heads blockIdx.y·hg + g (warp g; heads past
// the last are idle), softmax attention of qc[t, h] (W wide) over split s
// of the row's positions 0..pos[t] in its sequence's pages: scores
// qc·entry·scale, the weighted sum of the entries' latents (R). The S
// splits of a row are fixed by the host from the row count alone; each
// covers per = ceil(ceil(L/S)/MLA_TP)·MLA_TP positions (L = pos[t] + 1,
// read on the device, so a captured graph stays valid as contexts grow);
// an empty split writes an empty partial. Per tile of MLA_TP positions the
// block copies the entries to shared memory (a warp per entry, coalesced),
// then warp g scores them (a warp-wide dot per position, lane j keeping
// position j's score), updates its online softmax and accumulates the
// latents, lane c owning latent values c, c+32, .... With S = 1 it writes
// olat[t, h] normalised; else the unnormalised partial pacc[t, h, s] and
// its max and sum pml[t, h, s] for mla_merge. grid (n, ceil(heads/hg), S),
// block hg·32; shared memory (mlaAttnSmem in mla.go): qs [hg][W] |
// ks [MLA_TP][W] | acc [hg][R] | ps [hg][MLA_TP] floats.
extern "C" __global__ void mla_attn(float *olat, float *pacc, float *pml, const float *qc, const float *cache, const int *pos,
				    const int *rowseq, const int *page_off, const int *pages, int page_size, int heads, int R, int W,
				    float scale, int S, int hg) {
	KT_GRID_DEP();
	extern __shared__ float mlasm[];
	const int t = blockIdx.x, s = blockIdx.z, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	const int h = blockIdx.y * hg + warp;
	const bool on = warp < hg && h < heads;
	float *qs = mlasm + warp * W, *ks = mlasm + hg * W, *acc = ks + MLA_TP * W + warp * R;
	float *ps = ks + MLA_TP * W + hg * R + warp * MLA_TP;
	const int L = pos[t] + 1;
	const int per = ((L + S - 1) / S + MLA_TP - 1) / MLA_TP * MLA_TP;
	const int p0 = s * per, p1 = min(L, p0 + per);
	const int *pg = pages + page_off[rowseq[t]];
	const long long row = (long long)t * heads + h;
	if (on) {
		for (int d = lane; d < W; d += 32) qs[d] = qc[row * W + d];
		for (int c = lane; c < R; c += 32) acc[c] = 0.0f;
	}
	float m = -KT_INF, l = 0.0f;
	for (int pt = p0; pt < p1; pt += MLA_TP) {
		const int cnt = min(MLA_TP, p1 - pt);
		__syncthreads(); // the last tile's readers of ks are done
		for (int r = warp; r < cnt; r += nw) {
			const int p = pt + r;
			const float *e = cache + ((long long)pg[p / page_size] * page_size + p % page_size) * W;
			for (int d = lane; d < W; d += 32) ks[r * W + d] = e[d];
		}
		__syncthreads();
		if (on) {
			float sc = -KT_INF;
			for (int j = 0; j < cnt; j++) {
				float part = 0.0f;
				for (int d = lane; d < W; d += 32) part += qs[d] * ks[j * W + d];
				part = warp_sum(part);
				if (lane == j) sc = part * scale;
			}
			const float mn = fmaxf(m, warp_max(sc));
			const float alpha = expf(m - mn); // 0 on the first tile (m = -inf)
			const float e = lane < cnt ? expf(sc - mn) : 0.0f;
			l = l * alpha + warp_sum(e);
			m = mn;
			ps[lane] = e;
			__syncwarp();
			for (int c = lane; c < R; c += 32) {
				float a = acc[c] * alpha;
				for (int j = 0; j < cnt; j++) a += ps[j] * ks[j * W + c];
				acc[c] = a;
			}
			__syncwarp();
		}
	}
	if (!on) return;
	if (S == 1) {
		for (int c = lane; c < R; c += 32) olat[row * R + c] = acc[c] / l;
		return;
	}
	for (int c = lane; c < R; c += 32) pacc[(row * S + s) * R + c] = acc[c];
	if (lane == 0) {
		pml[(row * S + s) * 2] = m;
		pml[(row * S + s) * 2 + 1] = l;
	}
}

// mla_merge: olat[t, h] = Σ_s e^(m_s − M)·acc_s / Σ_s e^(m_s − M)·l_s over
// the S ≤ 256 partials of (row t, head h); empty splits (m_s = −inf) weigh
// nothing. grid (n, heads), block 256.
extern "C" __global__ void __launch_bounds__(256) mla_merge(float *olat, const float *pacc, const float *pml, int heads, int R, int S) {
	KT_GRID_DEP();
	__shared__ float wsplit[256];
	__shared__ float scratch[32];
	const int tid = threadIdx.x;
	const long long row = (long long)blockIdx.x * heads + blockIdx.y;
	const float m = tid < S ? pml[(row * S + tid) * 2] : -KT_INF;
	const float M = block_max(m, scratch);
	const float w = m == -KT_INF ? 0.0f : expf(m - M);
	wsplit[tid] = w;
	const float l = block_sum(tid < S ? w * pml[(row * S + tid) * 2 + 1] : 0.0f, scratch);
	__syncthreads();
	for (int c = tid; c < R; c += blockDim.x) {
		float a = 0.0f;
		for (int i = 0; i < S; i++) {
			const float wi = wsplit[i];
			if (wi != 0.0f) a += wi * pacc[(row * S + i) * R + c];
		}
		olat[row * R + c] = a / l;
	}
}

// mla_v_up: out[t, h, v] = Σ_c olat[t, h, c]·w[h·(nope+vd) + nope + v, c]
// (head h's value rows applied to its attended latent): warp j of a block
// takes output v = blockIdx.x·8 + j for MLA_RB rows whose latents are in
// shared memory (MLA_RB·R floats), lanes over c, then a warp sum. grid
// (ceil(vd/8), heads, ceil(n/MLA_RB)), block 256.
extern "C" __global__ void __launch_bounds__(256) mla_v_up(act_t *out, const float *olat, const void *w, const float *ws, int wdt, int bn, int bk,
							 int sc, int heads, int nope, int vd, int R, int n) {
	KT_GRID_DEP();
	extern __shared__ float mlasm[];
	const int h = blockIdx.y, r0 = blockIdx.z * MLA_RB, rows = min(MLA_RB, n - r0);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, v = blockIdx.x * 8 + warp;
	for (int i = threadIdx.x; i < rows * R; i += blockDim.x) {
		const int r = i / R, c = i % R;
		mlasm[i] = olat[((long long)(r0 + r) * heads + h) * R + c];
	}
	__syncthreads();
	if (v >= vd) return;
	float acc[MLA_RB];
#pragma unroll
	for (int i = 0; i < MLA_RB; i++) acc[i] = 0.0f;
	const long long wr = (long long)h * (nope + vd) + nope + v;
	for (int c = lane; c < R; c += 32) {
		const float x = mla_w(w, ws, wdt, wr, c, R, bn, bk, sc);
#pragma unroll
		for (int i = 0; i < MLA_RB; i++)
			if (i < rows) acc[i] += mlasm[i * R + c] * x;
	}
#pragma unroll
	for (int i = 0; i < MLA_RB; i++) {
		if (i < rows) {
			const float sum = warp_sum(acc[i]);
			if (lane == 0) st_act(out, ((long long)(r0 + i) * heads + h) * vd + v, sum);
		}
	}
}
