// Mixture-of-experts routing and GPU-resident expert FFN.

// router_topk_bf16: softmax over E router logits (float32), the k largest
// (ties to the lower id), renormalised when norm != 0, weights rounded to
// bf16 as HF does (routing_weights.to(hidden dtype)). grid T, block 256.
#define RT_MAXK 32
extern "C" __global__ void router_topk_bf16(int *ids, float *weights, const bf16 *logits, int E, int k, int norm) {
	KT_GRID_DEP();
	__shared__ float scratch[32];
	__shared__ float sv[256];
	__shared__ int si[256];
	extern __shared__ float probs[]; // E
	const bf16 *row = logits + (long long)blockIdx.x * E;
	float mx = -KT_INF;
	for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, bf2f(row[e]));
	mx = block_max(mx, scratch);
	float sum = 0.0f;
	for (int e = threadIdx.x; e < E; e += blockDim.x) {
		float p = expf(bf2f(row[e]) - mx);
		probs[e] = p;
		sum += p;
	}
	sum = block_sum(sum, scratch);
	__shared__ float chosen[RT_MAXK];
	__shared__ int chosen_id[RT_MAXK];
	for (int r = 0; r < k; r++) {
		float bv = -1.0f;
		int bi = 0x7fffffff;
		for (int e = threadIdx.x; e < E; e += blockDim.x) {
			float p = probs[e];
			if (p > bv || (p == bv && e < bi)) { bv = p; bi = e; }
		}
		sv[threadIdx.x] = bv;
		si[threadIdx.x] = bi;
		__syncthreads();
		for (int o = blockDim.x / 2; o > 0; o >>= 1) {
			if (threadIdx.x < o) {
				float ov = sv[threadIdx.x + o];
				int oi = si[threadIdx.x + o];
				if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) {
					sv[threadIdx.x] = ov;
					si[threadIdx.x] = oi;
				}
			}
			__syncthreads();
		}
		if (threadIdx.x == 0) {
			chosen[r] = sv[0] / sum;
			chosen_id[r] = si[0];
			probs[si[0]] = -2.0f; // taken
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		float tot = 0.0f;
		for (int r = 0; r < k; r++) tot += chosen[r];
		for (int r = 0; r < k; r++) {
			float w = norm ? chosen[r] / tot : chosen[r];
			ids[blockIdx.x * k + r] = chosen_id[r];
			weights[blockIdx.x * k + r] = rbf(w);
		}
	}
}

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

// moe_gather copies token rows into expert-sorted order: row r gets
// x[sorted[r] / k] (zeros for padding). grid rows, block 128.
extern "C" __global__ void moe_gather_bf16(bf16 *xs, const bf16 *x, const int *sorted, const int *counts, int E,
					   int BM, int H, int k) {
	KT_GRID_DEP();
	int r = blockIdx.x;
	if (r >= counts[E] * BM) return;
	int p = sorted[r];
	bf16 *dst = xs + (long long)r * H;
	if (p < 0) {
		for (int i = threadIdx.x; i < H; i += blockDim.x) dst[i] = 0;
		return;
	}
	const bf16 *src = x + (long long)(p / k) * H;
	for (int i = threadIdx.x * 8; i < H; i += blockDim.x * 8) *(uint4 *)(dst + i) = *(const uint4 *)(src + i);
}

// moe_gemm_bf16: grouped GEMM over expert-sorted rows, for few rows per
// expert (decode): out[r][n] = sum_k in[r][k] * W[e][n][k], e the block's
// expert. Each block takes MOE_BM rows and 64 output columns; each warp
// 8 columns, streaming weight rows with 16-byte loads so each weight byte
// is read once per BM rows. Blocks past counts[E] exit (the grid is sized
// for the worst case, so the launch is graph-capturable).
// grid (cap/MOE_BM, N/64), block 256; K % 256 == 0.
#define MOE_BM 8
#define MOE_KC 512
extern "C" __global__ void __launch_bounds__(256) moe_gemm_bf16(bf16 *out, const bf16 *in, const bf16 *W,
								 const int *block_expert, const int *counts, int E,
								 int N, int K) {
	KT_GRID_DEP();
	const int blk = blockIdx.x;
	if (blk >= counts[E]) return;
	const int e = block_expert[blk];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int n0 = blockIdx.y * 64 + warp * 8;
	__shared__ __align__(16) bf16 xs[MOE_BM][MOE_KC];
	float acc[8][MOE_BM];
#pragma unroll
	for (int c = 0; c < 8; c++)
#pragma unroll
		for (int r = 0; r < MOE_BM; r++) acc[c][r] = 0.0f;
	const bf16 *We = W + (long long)e * N * K;
	const bf16 *inb = in + (long long)blk * MOE_BM * K;
	for (int kc = 0; kc < K; kc += MOE_KC) {
		int kn = min(MOE_KC, K - kc);
		__syncthreads();
		for (int i = threadIdx.x * 8; i < MOE_BM * kn; i += blockDim.x * 8) {
			int r = i / kn, c = i % kn;
			*(uint4 *)&xs[r][c] = *(const uint4 *)(inb + (long long)r * K + kc + c);
		}
		__syncthreads();
		for (int kk = lane * 8; kk < kn; kk += 256) {
			float xf[MOE_BM][8];
#pragma unroll
			for (int r = 0; r < MOE_BM; r++) load8(&xs[r][kk], xf[r]);
#pragma unroll
			for (int c = 0; c < 8; c++) {
				int n = n0 + c;
				if (n >= N) break;
				float wf[8];
				load8(We + (long long)n * K + kc + kk, wf);
#pragma unroll
				for (int r = 0; r < MOE_BM; r++) {
					float a = 0.0f;
#pragma unroll
					for (int i = 0; i < 8; i++) a += wf[i] * xf[r][i];
					acc[c][r] += a;
				}
			}
		}
	}
#pragma unroll
	for (int c = 0; c < 8; c++) {
		int n = n0 + c;
#pragma unroll
		for (int r = 0; r < MOE_BM; r++) {
			float v = warp_sum(acc[c][r]);
			if (lane == 0 && n < N) out[((long long)blk * MOE_BM + r) * N + n] = f2bf(v);
		}
	}
}

// moe_combine_bf16: out[t] = (accumulate ? out[t] : 0) + sum over slots of
// bf16(w[t][slot] * y[pos[t*k+slot]]), summed in slot order in float32 and
// rounded once. Pairs whose expert is elsewhere (pos < 0) add nothing.
// grid T, block 256.
extern "C" __global__ void moe_combine_bf16(bf16 *out, const bf16 *y, const int *pos, const float *w, int H, int k,
					    int accumulate) {
	KT_GRID_DEP();
	int t = blockIdx.x;
	for (int i = threadIdx.x; i < H; i += blockDim.x) {
		float a = accumulate ? bf2f(out[(long long)t * H + i]) : 0.0f;
		for (int s = 0; s < k; s++) {
			int p = pos[t * k + s];
			if (p >= 0) a += rbf(w[t * k + s] * bf2f(y[(long long)p * H + i]));
		}
		out[(long long)t * H + i] = f2bf(a);
	}
}
