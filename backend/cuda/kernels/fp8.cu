// fp8.cu: block-scaled FP8 (E4M3) weights, kept in FP8 on the device (see
// backend/cuda/fp8.go). w[o, k] = e4m3(q[o, k]) * scale[o/bn, k/bk]; the
// scales are float32 [ceil(O/bn), sc = ceil(K/bk)]. Activations and outputs
// are float32, products accumulate in float32.
//
// Decoding: an E4M3 code's sign moved to bit 31 and its 7 exponent+mantissa
// bits to bits 20..26 is a float32 equal to the code's value times 2^-120
// (subnormal codes become float denormals, exactly); one exact multiply by
// 2^120 gives the value. The NaN codes 0x7f/0xff decode to ±480 here (they
// never occur in checkpoints).

__device__ __forceinline__ float fp8_dec(u32 bits) { return __uint_as_float(bits) * 0x1p120f; }

// fp8x4 decodes the four codes of w (byte 0 first).
__device__ __forceinline__ void fp8x4(u32 w, float *f) {
	f[0] = fp8_dec(((w << 24) & 0x80000000u) | ((w << 20) & 0x07f00000u));
	f[1] = fp8_dec(((w << 16) & 0x80000000u) | ((w << 12) & 0x07f00000u));
	f[2] = fp8_dec(((w << 8) & 0x80000000u) | ((w << 4) & 0x07f00000u));
	f[3] = fp8_dec((w & 0x80000000u) | ((w >> 4) & 0x07f00000u));
}

__device__ __forceinline__ float fp8_one(unsigned char c) {
	u32 w = c;
	return fp8_dec(((w << 24) & 0x80000000u) | ((w << 20) & 0x07f00000u));
}

// fp8_gemv: out[r, o] = Σ_k x[r, k]·w[o, k] for n ≤ 8 rows (a decode
// step): a warp per output row, each lane reading 16 codes (16 bytes) at a
// time, so a warp streams 512 contiguous bytes per step; a lane's 16 codes
// lie in one k-block (bk % 16 == 0), so its partial dot is scaled once.
// Needs K % 16 == 0, bk % 16 == 0, 16-byte aligned q and x.
// grid ceil(O/8), block 256.
extern "C" __global__ void __launch_bounds__(256) fp8_gemv(float *out, const float *x, const unsigned char *q,
							   const float *scale, int n, int O, int K, int bn, int bk,
							   int sc) {
	KT_GRID_DEP();
	const int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (o >= O) return;
	const unsigned char *wr = q + (long long)o * K;
	const float *sr = scale + (long long)(o / bn) * sc;
	float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
	for (int k = lane * 16; k < K; k += 512) {
		const uint4 u = *(const uint4 *)(wr + k);
		float w[16];
		fp8x4(u.x, w);
		fp8x4(u.y, w + 4);
		fp8x4(u.z, w + 8);
		fp8x4(u.w, w + 12);
		const float bs = sr[k / bk];
#pragma unroll
		for (int r = 0; r < 8; r++) {
			if (r < n) {
				const float4 *xr = (const float4 *)(x + (long long)r * K + k);
				const float4 a = xr[0], b = xr[1], c = xr[2], d = xr[3];
				float p = a.x * w[0] + a.y * w[1] + a.z * w[2] + a.w * w[3];
				p += b.x * w[4] + b.y * w[5] + b.z * w[6] + b.w * w[7];
				p += c.x * w[8] + c.y * w[9] + c.z * w[10] + c.w * w[11];
				p += d.x * w[12] + d.y * w[13] + d.z * w[14] + d.w * w[15];
				s[r] += p * bs;
			}
		}
	}
#pragma unroll
	for (int r = 0; r < 8; r++) {
		if (r < n) {
			const float v = warp_sum(s[r]);
			if (lane == 0) out[(long long)r * O + o] = v;
		}
	}
}

// fp8_matmul_gen: the same product for any shape (any n, K, block sizes,
// alignment): a warp per output, one code at a time, each weight element
// f32(e4m3) * scale as the CPU backend computes it. grid (ceil(O/8), n),
// block 256.
extern "C" __global__ void fp8_matmul_gen(float *out, const float *x, const unsigned char *q, const float *scale,
					  int O, int K, int bn, int bk, int sc) {
	KT_GRID_DEP();
	const int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31, r = blockIdx.y;
	if (o >= O) return;
	const unsigned char *wr = q + (long long)o * K;
	const float *sr = scale + (long long)(o / bn) * sc;
	const float *xr = x + (long long)r * K;
	float s = 0.0f;
	for (int k = lane; k < K; k += 32) s += xr[k] * (fp8_one(wr[k]) * sr[k / bk]);
	s = warp_sum(s);
	if (lane == 0) out[(long long)r * O + o] = s;
}

// mma_bf16_16816: d = a·b + d for one warp's m16n8k16 tile, bf16 inputs
// and float32 accumulators, in PTX's fragment layout (g = lane/4,
// t = lane%4): a0 A[g][2t..2t+1], a1 A[g+8][2t..], a2 A[g][2t+8..],
// a3 A[g+8][2t+8..]; b0 B[2t..2t+1][g], b1 B[2t+8..][g]; d0,d1 C[g][2t..],
// d2,d3 C[g+8][2t..]. The lower k (column) index is the low half of each
// 32-bit register.
#ifndef KT_EMU
__device__ __forceinline__ void mma_bf16_16816(float *d, const u32 *a, const u32 *b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
#endif

#define FP8_TM 64   // activation rows per block
#define FP8_TN 64   // outputs per block
#define FP8_TK 32   // k per shared-memory tile
#define FP8_LD 40   // padded row stride of the tiles, in bf16 (conflict-free fragment loads)

// fp8_gemm_mma: out[r, o] = Σ_k x[r, k]·w[o, k] for larger n on the tensor
// cores (sm_80+): per block a 64×64 output tile, 4 warps of 16 rows × 64
// outputs. Each 32-wide k step stages x as two bf16 halves (hi = bf16(x),
// lo = bf16(x − hi): about 16 bits of the float32 activations) and the FP8
// codes decoded to bf16 (exact: E4M3 fits in bf16) in shared memory; a
// 16-k step runs two mma (hi and lo) per 8-output tile into a per-k-block
// accumulator that is scaled by the block's scale and added to the result
// when the k-block ends. Needs bk % 16 == 0; vec (K % 16 == 0 and 16-byte
// aligned x, q) enables the wide loads. grid (ceil(O/64), ceil(n/64)),
// block 128.
extern "C" __global__ void __launch_bounds__(128) fp8_gemm_mma(float *out, const float *x, const unsigned char *q,
							       const float *scale, int n, int O, int K, int bn,
							       int bk, int sc, int vec) {
	KT_GRID_DEP();
	// u32 arrays: the fragment loads read bf16 pairs as 32-bit words
	__shared__ u32 ahi_w[FP8_TM * FP8_LD / 2], alo_w[FP8_TM * FP8_LD / 2], bs_w[FP8_TN * FP8_LD / 2];
	bf16 *ahi = (bf16 *)ahi_w, *alo = (bf16 *)alo_w, *bs = (bf16 *)bs_w;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
	const int m0 = blockIdx.y * FP8_TM, n0 = blockIdx.x * FP8_TN;
	float acc[8][4], tmp[8][4];
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) acc[j][i] = tmp[j][i] = 0.0f;
	// the row and 16-wide k half this thread stages
	const int lr = tid >> 1, lk = (tid & 1) * 16;
	for (int k0 = 0; k0 < K; k0 += FP8_TK) {
		{
			float xv[16];
			const int row = m0 + lr, kk = k0 + lk;
			const float *xp = x + (long long)row * K + kk;
			if (row < n && vec && kk + 16 <= K) {
#pragma unroll
				for (int v = 0; v < 4; v++) {
					const float4 f = ((const float4 *)xp)[v];
					xv[4 * v] = f.x, xv[4 * v + 1] = f.y, xv[4 * v + 2] = f.z, xv[4 * v + 3] = f.w;
				}
			} else {
#pragma unroll
				for (int v = 0; v < 16; v++) xv[v] = (row < n && kk + v < K) ? xp[v] : 0.0f;
			}
#pragma unroll
			for (int v = 0; v < 16; v++) {
				const bf16 h = f2bf(xv[v]);
				ahi[lr * FP8_LD + lk + v] = h;
				alo[lr * FP8_LD + lk + v] = f2bf(xv[v] - bf2f(h));
			}
			float wv[16];
			const int col = n0 + lr;
			const unsigned char *wp = q + (long long)col * K + kk;
			if (col < O && vec && kk + 16 <= K) {
				const uint4 u = *(const uint4 *)wp;
				fp8x4(u.x, wv);
				fp8x4(u.y, wv + 4);
				fp8x4(u.z, wv + 8);
				fp8x4(u.w, wv + 12);
			} else {
#pragma unroll
				for (int v = 0; v < 16; v++) wv[v] = (col < O && kk + v < K) ? fp8_one(wp[v]) : 0.0f;
			}
#pragma unroll
			for (int v = 0; v < 16; v++) bs[lr * FP8_LD + lk + v] = f2bf(wv[v]);
		}
		__syncthreads();
#pragma unroll
		for (int ks = 0; ks < FP8_TK; ks += 16) {
			const int kg = k0 + ks;
			if (kg < K) {
				const int ar = warp * 16 + g;
				u32 ah[4], al[4];
				ah[0] = *(const u32 *)&ahi[ar * FP8_LD + ks + 2 * t4];
				ah[1] = *(const u32 *)&ahi[(ar + 8) * FP8_LD + ks + 2 * t4];
				ah[2] = *(const u32 *)&ahi[ar * FP8_LD + ks + 2 * t4 + 8];
				ah[3] = *(const u32 *)&ahi[(ar + 8) * FP8_LD + ks + 2 * t4 + 8];
				al[0] = *(const u32 *)&alo[ar * FP8_LD + ks + 2 * t4];
				al[1] = *(const u32 *)&alo[(ar + 8) * FP8_LD + ks + 2 * t4];
				al[2] = *(const u32 *)&alo[ar * FP8_LD + ks + 2 * t4 + 8];
				al[3] = *(const u32 *)&alo[(ar + 8) * FP8_LD + ks + 2 * t4 + 8];
#pragma unroll
				for (int j = 0; j < 8; j++) {
					u32 bb[2];
					bb[0] = *(const u32 *)&bs[(j * 8 + g) * FP8_LD + ks + 2 * t4];
					bb[1] = *(const u32 *)&bs[(j * 8 + g) * FP8_LD + ks + 2 * t4 + 8];
					mma_bf16_16816(tmp[j], ah, bb);
					mma_bf16_16816(tmp[j], al, bb);
				}
				if ((kg + 16) % bk == 0 || kg + 16 >= K) {
					const int kb = kg / bk;
#pragma unroll
					for (int j = 0; j < 8; j++) {
						const int c = n0 + j * 8 + 2 * t4;
						const float s0 = c < O ? scale[(long long)(c / bn) * sc + kb] : 0.0f;
						const float s1 = c + 1 < O ? scale[(long long)((c + 1) / bn) * sc + kb] : 0.0f;
						acc[j][0] += tmp[j][0] * s0;
						acc[j][1] += tmp[j][1] * s1;
						acc[j][2] += tmp[j][2] * s0;
						acc[j][3] += tmp[j][3] * s1;
						tmp[j][0] = tmp[j][1] = tmp[j][2] = tmp[j][3] = 0.0f;
					}
				}
			}
		}
		__syncthreads();
	}
	const int r0 = m0 + warp * 16 + g;
#pragma unroll
	for (int j = 0; j < 8; j++) {
		const int c = n0 + j * 8 + 2 * t4;
		if (r0 < n) {
			if (c < O) out[(long long)r0 * O + c] = acc[j][0];
			if (c + 1 < O) out[(long long)r0 * O + c + 1] = acc[j][1];
		}
		if (r0 + 8 < n) {
			if (c < O) out[(long long)(r0 + 8) * O + c] = acc[j][2];
			if (c + 1 < O) out[(long long)(r0 + 8) * O + c + 1] = acc[j][3];
		}
	}
}

// Routed experts with block-scaled FP8 weights (the MoE op, see fp8.go):
// fp8_moe_gateup and fp8_moe_down are model.cu's m_moe_gateup and
// m_moe_down reading each weight element as f32(e4m3) * scale, as the CPU
// backend does; the FP8 codes stay in VRAM. ptrs holds per expert the
// addresses of its gate, up and down codes, sptrs those of their float32
// scales (same layout); all share one block [bn, bk].
__device__ __forceinline__ float fp8_silu(float x) { return x / (1.0f + (float)exp(-(double)x)); }

// fp8_moe_gateup: hbuf[p, i] = silu(gate_e[i]·x[t])·(up_e[i]·x[t]), gate
// and up [I, H]. grid (n·k, ceil(I/8)), block 256, smem H floats.
extern "C" __global__ void fp8_moe_gateup(float *hbuf, const float *x, const int *ids, const u64 *ptrs,
					  const u64 *sptrs, int H, int I, int k, int E, int bn, int bk) {
	KT_GRID_DEP();
	extern __shared__ float fxs[];
	const int p = blockIdx.x, e = ids[p], t = p / k;
	if (e < 0 || e >= E) return;
	for (int c = threadIdx.x; c < H; c += blockDim.x) fxs[c] = x[(long long)t * H + c];
	__syncthreads();
	const int i = blockIdx.y * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (i >= I) return;
	const int sc = (H + bk - 1) / bk;
	const unsigned char *gw = (const unsigned char *)ptrs[3 * e] + (long long)i * H;
	const unsigned char *uw = (const unsigned char *)ptrs[3 * e + 1] + (long long)i * H;
	const float *gs = (const float *)sptrs[3 * e] + (long long)(i / bn) * sc;
	const float *us = (const float *)sptrs[3 * e + 1] + (long long)(i / bn) * sc;
	float g = 0.0f, u = 0.0f;
	for (int c = lane; c < H; c += 32) {
		g += fxs[c] * (fp8_one(gw[c]) * gs[c / bk]);
		u += fxs[c] * (fp8_one(uw[c]) * us[c / bk]);
	}
	g = warp_sum(g);
	u = warp_sum(u);
	if (lane == 0) hbuf[(long long)p * I + i] = fp8_silu(g) * u;
}

// fp8_moe_down: ybuf[p, c] = down_e[c]·hbuf[p], down [H, I]. grid
// (n·k, ceil(H/8)), block 256, smem I floats.
extern "C" __global__ void fp8_moe_down(float *ybuf, const float *hbuf, const int *ids, const u64 *ptrs,
					const u64 *sptrs, int H, int I, int E, int bn, int bk) {
	KT_GRID_DEP();
	extern __shared__ float fhs[];
	const int p = blockIdx.x, e = ids[p];
	if (e < 0 || e >= E) return;
	for (int c = threadIdx.x; c < I; c += blockDim.x) fhs[c] = hbuf[(long long)p * I + c];
	__syncthreads();
	const int c = blockIdx.y * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (c >= H) return;
	const int sc = (I + bk - 1) / bk;
	const unsigned char *dw = (const unsigned char *)ptrs[3 * e + 2] + (long long)c * I;
	const float *ds = (const float *)sptrs[3 * e + 2] + (long long)(c / bn) * sc;
	float s = 0.0f;
	for (int i = lane; i < I; i += 32) s += fhs[i] * (fp8_one(dw[i]) * ds[i / bk]);
	s = warp_sum(s);
	if (lane == 0) ybuf[(long long)p * H + c] = s;
}

// Prefill through cuBLASLt (fp8.go, "fp8_split_gemm"): the weight
// w = f32(e4m3(q))·scale is written as two bf16 matrices stacked by rows,
// hi = bf16(w) and lo = bf16(w − hi) (about 16 bits of w), into a scratch
// buffer; the activations are split the same way (m_split_bf16); one bf16
// GEMM of [2n, K]·[2O, K]ᵀ gives the four products, which fp8_add_quarters
// sums.
//
// fp8_dequant_split: out[0..O·K) = hi, out[O·K..2·O·K) = lo. grid
// (ceil(K/256) capped, min(O, 65535)), block 256: rows by blockIdx.y (and
// strides of gridDim.y), columns by threads, so a row's scale row is found
// once and no element pays a 64-bit division.
extern "C" __global__ void fp8_dequant_split(bf16 *out, const unsigned char *q, const float *scale, int O, int K,
					     int bn, int bk, int sc) {
	KT_GRID_DEP();
	const long long total = (long long)O * K;
	for (int o = blockIdx.y; o < O; o += gridDim.y) {
		const float *srow = scale + (long long)(o / bn) * sc;
		const long long base = (long long)o * K;
		for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < K; k += gridDim.x * blockDim.x) {
			const float w = fp8_one(q[base + k]) * srow[k / bk];
			const bf16 hi = f2bf(w);
			out[base + k] = hi;
			out[total + base + k] = f2bf(w - bf2f(hi));
		}
	}
}

// fp8_add_quarters: out[r, c] = (d[r, c] + d[r, O+c]) + (d[n+r, c] +
// d[n+r, O+c]) for the GEMM result d [2n, 2O] (rows: x hi, x lo; columns:
// w hi, w lo). grid ceil(n·O/256), block 256.
extern "C" __global__ void fp8_add_quarters(float *out, const float *d, int n, int O) {
	KT_GRID_DEP();
	const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (long long)n * O) return;
	const long long r = i / O, c = i % O;
	const float *a = d + r * 2 * O + c, *b = d + (n + r) * 2 * O + c;
	out[i] = (a[0] + a[O]) + (b[0] + b[O]);
}
