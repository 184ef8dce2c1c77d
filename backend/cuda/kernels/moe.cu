// moe.cu: the op set's MoE (Backend.MoE): the routed experts run per
// (token, expert) pair, and the grouped path of prefill-sized steps.

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
// for the whole MoE op at one token.
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
// staging it in shared memory). grid (n·k, ceil(H/8)), block 256.
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

// The MoE op's grouped path (moe_grouped.go), for prefill-sized steps: the
// pairs sorted by expert (moe_align, each expert's rows padded to BM), each
// expert's rows through cuBLASLt GEMMs, activations split into two bf16
// parts (as MatMul's m_split_bf16) so the products keep ~f32 precision.

// moe_align groups the T*k (token, slot) pairs by expert, each expert's run
// padded to a multiple of BM rows so that a block of BM rows never mixes
// experts. Outputs:
//   sorted[cap]      pair index (t*k + slot) per row, -1 for padding
//   block_expert[]   the (local) expert of each BM-row block
//   pos[T*k]         the row of each pair (-1 if its expert is not here)
//   counts[E+1]      rows per expert (unpadded), then the number of blocks
// emap (optional, length E_logical) maps a routed id to the local expert
// slot or -1 (expert handled elsewhere, e.g. on the CPU). One block of 1024
// threads; E <= 1024.
extern "C" __global__ void __launch_bounds__(1024) moe_align(int *sorted, int *block_expert, int *pos, int *counts,
							     const int *ids, const int *emap, int n_pairs, int E,
							     int BM, int cap) {
	KT_GRID_DEP();
	__shared__ int cnt[1024], start[1025], fill[1024];
	for (int e = threadIdx.x; e < E; e += blockDim.x) { cnt[e] = 0; fill[e] = 0; }
	__syncthreads();
	for (int i = threadIdx.x; i < n_pairs; i += blockDim.x) {
		int e = ids[i];
		if (emap && e >= 0) e = emap[e];
		if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int acc = 0;
		for (int e = 0; e < E; e++) {
			start[e] = acc;
			acc += (cnt[e] + BM - 1) / BM * BM;
		}
		start[E] = acc;
		counts[E] = acc / BM;
	}
	__syncthreads();
	for (int e = threadIdx.x; e < E; e += blockDim.x) {
		counts[e] = cnt[e];
		for (int b = start[e] / BM; b < start[e + 1] / BM; b++) block_expert[b] = e;
	}
	for (int r = threadIdx.x; r < cap; r += blockDim.x) sorted[r] = -1;
	__syncthreads();
	// Deterministic placement: pairs keep their original order within an
	// expert (one thread per expert scans the pairs).
	for (int e = threadIdx.x; e < E; e += blockDim.x) {
		if (cnt[e] == 0) continue;
		int r = start[e];
		for (int i = 0; i < n_pairs; i++) {
			int x = ids[i];
			if (emap && x >= 0) x = emap[x];
			if (x == e) { sorted[r] = i; pos[i] = r; r++; }
		}
	}
	for (int i = threadIdx.x; i < n_pairs; i += blockDim.x) {
		int x = ids[i];
		if (emap && x >= 0) x = emap[x];
		if (!(x >= 0 && x < E)) pos[i] = -1;
	}
}

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
