// attnf32.cu: split-K ("flash-decoding") attention of the F32-activation
// backend (Backend.Attention in backend_ops.go) over its float32 paged KV
// cache, for head dims 128 and 256.
//
// A block takes one query row t, one kv head and one split of the row's
// positions 0..pos[t], and serves all G = heads/kvheads query heads of that
// kv head, so each K/V row is read once per row instead of once per query
// head. The number of splits S is a launch constant chosen by the host from
// the row count alone; the positions a split covers come from pos[t] on the
// device (per = ceil(ceil(L/S)/32)·32), so a captured CUDA graph stays
// correct as the contexts grow (empty splits write an empty partial).
// Everything per step (positions, row → sequence, page tables) is read from
// the step metadata buffers.
//
// Per tile of 32 positions: the tile's K rows are copied into shared memory
// (coalesced 16-byte loads; rows padded by 4 floats so that lane j reading
// row j is free of bank conflicts) while each warp loads its quarter of the
// V rows into registers; lane j scores position j against the warp's query
// heads (g ≡ warp mod 4); the online softmax statistics are updated once
// per tile and head (warp shuffles); for P·V warp w owns dims
// [w·D/4, (w+1)·D/4) of every head, D/128 per lane.
//
// With S = 1 the block writes the normalised output; otherwise it writes
// its unnormalised accumulator, max and sum, and m_attn_merge<D> combines
// the S partials of each (row, head).

#define AS_TP 32
#define AS_NT 128
#define AM_NT 256 // merge block: at most AM_NT splits

// cp.async (sm_80+): 16 bytes global → shared without passing through
// registers; the next tile's K rows stream in while this tile is computed.
__device__ __forceinline__ void cp_async16(float *smem, const float *gmem) {
	u32 sa;
	asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(sa) : "l"(smem));
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

// attnSmem (Go) must match: qs [2048] | ks [2][AS_TP][D+4] | sc [AS_TP][2048/D] floats.

// ATTNF32_EMU_BEGIN (testdata/gdnemu/run.sh compiles from here on for the host)

template <int D>
__device__ __forceinline__ void attn_split_f32(float *out, float *pacc, float *pml, const float *q, const float *kc,
					       const float *vc, const int *pos, const int *rowseq, const int *page_off,
					       const int *pages, int page_size, int heads, int kvheads, float scale, int S) {
	constexpr int MAXG = 2048 / D, KS = D + 4, DPL = D / 128;
	extern __shared__ __attribute__((aligned(16))) float attsm[];
	float *qs = attsm;                    // [MAXG][D]
	float *kbuf = qs + MAXG * D;          // [2][AS_TP][KS]: tiles i and i+1
	float *sc = kbuf + 2 * AS_TP * KS;    // [position][head]
	__shared__ float mrow[MAXG], lrow[MAXG], arow[MAXG];
	__shared__ long long roffs[2][AS_TP];
	const int t = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int G = heads / kvheads;
	const int L = pos[t] + 1;
	const int per = ((L + S - 1) / S + AS_TP - 1) / AS_TP * AS_TP;
	const int p0 = s * per, p1 = min(L, p0 + per);
	const int ntiles = p1 > p0 ? (p1 - p0 + AS_TP - 1) / AS_TP : 0;
	const long long kvw = (long long)kvheads * D;
	const int *pg = pages + page_off[rowseq[t]];
	const long long qbase = ((long long)t * heads + (long long)kvh * G) * D;
	for (int i = tid; i < G * D; i += AS_NT) qs[i] = q[qbase + i];
	if (tid < MAXG) {
		mrow[tid] = -KT_INF;
		lrow[tid] = 0.0f;
	}
	const int d0 = warp * (D / 4) + lane * DPL;
	float acc[MAXG][DPL];
#pragma unroll
	for (int g = 0; g < MAXG; g++)
#pragma unroll
		for (int i = 0; i < DPL; i++) acc[g][i] = 0.0f;
	// Tile 0's row offsets and K copy; then per tile: the next tile's
	// offsets and K copy are issued before this tile's V loads and compute.
	if (ntiles > 0 && tid < min(AS_TP, p1 - p0)) {
		const int p = p0 + tid;
		roffs[0][tid] = ((long long)pg[p / page_size] * page_size + p % page_size) * kvw + (long long)kvh * D;
	}
	__syncthreads();
	if (ntiles > 0) {
		const int cnt = min(AS_TP, p1 - p0);
		for (int e = tid; e < cnt * (D / 4); e += AS_NT) {
			const int r = e / (D / 4), c = e % (D / 4);
			cp_async16(kbuf + r * KS + c * 4, kc + roffs[0][r] + c * 4);
		}
	}
	cp_async_commit();
	for (int it = 0; it < ntiles; it++) {
		const int b = it & 1, pt = p0 + it * AS_TP, cnt = min(AS_TP, p1 - pt);
		const long long *roff = roffs[b];
		const float *ks = kbuf + b * AS_TP * KS;
		const int pn = pt + AS_TP, cn = it + 1 < ntiles ? min(AS_TP, p1 - pn) : 0;
		if (tid < cn) {
			const int p = pn + tid;
			roffs[b ^ 1][tid] = ((long long)pg[p / page_size] * page_size + p % page_size) * kvw + (long long)kvh * D;
		}
		__syncthreads(); // next offsets visible; the last tile's readers of kbuf[b^1], sc, arow are done
		for (int e = tid; e < cn * (D / 4); e += AS_NT) {
			const int r = e / (D / 4), c = e % (D / 4);
			cp_async16(kbuf + (b ^ 1) * AS_TP * KS + r * KS + c * 4, kc + roffs[b ^ 1][r] + c * 4);
		}
		cp_async_commit();
		float vr[AS_TP][DPL];
#pragma unroll
		for (int r = 0; r < AS_TP; r++) {
			if (r < cnt) {
				const float *v = vc + roff[r] + d0;
				if (DPL == 2) {
					const float2 v2 = *(const float2 *)v;
					vr[r][0] = v2.x;
					vr[r][DPL - 1] = v2.y;
				} else {
					vr[r][0] = v[0];
				}
			} else {
#pragma unroll
				for (int i = 0; i < DPL; i++) vr[r][i] = 0.0f;
			}
		}
		cp_async_wait1(); // this thread's copies of tile it have landed
		__syncthreads();
		// scores of position lane for heads warp, warp+4, ... (at most 4 per warp)
		float dot[MAXG / 4];
#pragma unroll
		for (int j = 0; j < MAXG / 4; j++) dot[j] = 0.0f;
		if (lane < cnt) {
			const float *kr = ks + lane * KS;
#pragma unroll 4
			for (int d = 0; d < D; d += 4) {
				const float4 kv = *(const float4 *)(kr + d);
#pragma unroll
				for (int j = 0; j < MAXG / 4; j++) {
					const int g = warp + 4 * j;
					if (g < G) {
						const float4 qv = *(const float4 *)(qs + g * D + d);
						dot[j] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
					}
				}
			}
		}
#pragma unroll
		for (int j = 0; j < MAXG / 4; j++) {
			const int g = warp + 4 * j;
			if (g < G) {
				const float sv = lane < cnt ? dot[j] * scale : -KT_INF;
				const float mo = mrow[g];
				const float mn = fmaxf(mo, warp_max(sv));
				const float e = lane < cnt ? expf(sv - mn) : 0.0f;
				const float sum = warp_sum(e);
				sc[lane * MAXG + g] = e;
				if (lane == 0) {
					const float a = expf(mo - mn); // 0 the first time (mo = -inf)
					arow[g] = a;
					lrow[g] = lrow[g] * a + sum;
					mrow[g] = mn;
				}
			}
		}
		__syncthreads();
#pragma unroll
		for (int g = 0; g < MAXG; g++) {
			if (g < G) {
				const float a = arow[g];
#pragma unroll
				for (int i = 0; i < DPL; i++) acc[g][i] *= a;
			}
		}
#pragma unroll
		for (int r = 0; r < AS_TP; r++) {
			if (r < cnt) {
#pragma unroll
				for (int g4 = 0; g4 < MAXG; g4 += 4) {
					if (g4 < G) {
						const float4 p4 = *(const float4 *)&sc[r * MAXG + g4];
						const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
						for (int j = 0; j < 4; j++) {
							if (g4 + j < G) {
#pragma unroll
								for (int i = 0; i < DPL; i++) acc[g4 + j][i] += pv[j] * vr[r][i];
							}
						}
					}
				}
			}
		}
	}
	__syncthreads();
#pragma unroll
	for (int g = 0; g < MAXG; g++) {
		if (g < G) {
			const long long h = (long long)t * heads + (long long)kvh * G + g;
			if (S == 1) {
				const float l = lrow[g];
#pragma unroll
				for (int i = 0; i < DPL; i++) out[h * D + d0 + i] = acc[g][i] / l;
			} else {
#pragma unroll
				for (int i = 0; i < DPL; i++) pacc[(h * S + s) * D + d0 + i] = acc[g][i];
				if (tid == 0) {
					pml[(h * S + s) * 2] = mrow[g];
					pml[(h * S + s) * 2 + 1] = lrow[g];
				}
			}
		}
	}
}

// attn_merge_f32: out[t, h] = Σ_s e^(m_s − M)·acc_s / Σ_s e^(m_s − M)·l_s over
// the S ≤ AM_NT partials of (row t, head h). grid (n, heads), block AM_NT:
// warp w sums splits w, w+8, ... (16-byte loads, empty splits skipped: a
// short context leaves most of them empty), then the warps' sums are added.
template <int D>
__device__ __forceinline__ void attn_merge_f32(float *out, const float *pacc, const float *pml, int heads, int S) {
	constexpr int NV = D / 128, NW = AM_NT / 32;
	__shared__ float ws[AM_NT];
	__shared__ float scratch[32];
	__shared__ __attribute__((aligned(16))) float red[NW * D];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const long long h = (long long)blockIdx.x * heads + blockIdx.y;
	const float m = tid < S ? pml[(h * S + tid) * 2] : -KT_INF;
	const float M = block_max(m, scratch);
	const float w = m == -KT_INF ? 0.0f : expf(m - M);
	ws[tid] = w;
	const float l = block_sum(tid < S ? w * pml[(h * S + tid) * 2 + 1] : 0.0f, scratch);
	__syncthreads();
	float a[NV][4];
#pragma unroll
	for (int v = 0; v < NV; v++)
#pragma unroll
		for (int j = 0; j < 4; j++) a[v][j] = 0.0f;
#pragma unroll 4
	for (int i = warp; i < S; i += NW) {
		const float wi = ws[i];
		if (wi != 0.0f) {
#pragma unroll
			for (int v = 0; v < NV; v++) {
				const float4 p = *(const float4 *)(pacc + (h * S + i) * D + v * 128 + lane * 4);
				a[v][0] += wi * p.x;
				a[v][1] += wi * p.y;
				a[v][2] += wi * p.z;
				a[v][3] += wi * p.w;
			}
		}
	}
#pragma unroll
	for (int v = 0; v < NV; v++)
#pragma unroll
		for (int j = 0; j < 4; j++) red[warp * D + v * 128 + lane * 4 + j] = a[v][j];
	__syncthreads();
	for (int d = tid; d < D; d += AM_NT) {
		float sum = 0.0f;
#pragma unroll
		for (int v = 0; v < NW; v++) sum += red[v * D + d];
		out[h * D + d] = sum / l;
	}
}

extern "C" __global__ void __launch_bounds__(AS_NT) m_attn_split128(float *out, float *pacc, float *pml, const float *q,
								      const float *kc, const float *vc, const int *pos,
								      const int *rowseq, const int *page_off, const int *pages,
								      int page_size, int heads, int kvheads, float scale, int S) {
	KT_GRID_DEP();
	attn_split_f32<128>(out, pacc, pml, q, kc, vc, pos, rowseq, page_off, pages, page_size, heads, kvheads, scale, S);
}
extern "C" __global__ void __launch_bounds__(AS_NT) m_attn_split256(float *out, float *pacc, float *pml, const float *q,
								      const float *kc, const float *vc, const int *pos,
								      const int *rowseq, const int *page_off, const int *pages,
								      int page_size, int heads, int kvheads, float scale, int S) {
	KT_GRID_DEP();
	attn_split_f32<256>(out, pacc, pml, q, kc, vc, pos, rowseq, page_off, pages, page_size, heads, kvheads, scale, S);
}
extern "C" __global__ void __launch_bounds__(AM_NT) m_attn_merge128(float *out, const float *pacc, const float *pml, int heads, int S) {
	KT_GRID_DEP();
	attn_merge_f32<128>(out, pacc, pml, heads, S);
}
extern "C" __global__ void __launch_bounds__(AM_NT) m_attn_merge256(float *out, const float *pacc, const float *pml, int heads, int S) {
	KT_GRID_DEP();
	attn_merge_f32<256>(out, pacc, pml, heads, S);
}
