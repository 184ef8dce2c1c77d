// gemv.cu: the decode-step MatMul of the F32-activation backend (Backend.MatMul
// in backend_ops.go) for 1..8 activation rows and bf16 weights, on the tensor
// cores (mma.sync, sm_80 and newer; a module of its own so that older GPUs
// keep every other module).
//
// The arithmetic is MatMul's split GEMM (m_split_bf16 + cuBLASLt + m_add_halves
// in model.cu), not a different approximation: each float32 activation x is
// split into hi = bf16(x) and lo = bf16(x − hi), both parts are multiplied by
// the bf16 weights on the tensor cores (products exact, float32 accumulation)
// and out = (Σ hi·w) + (Σ lo·w). Only the order of the float32 additions
// differs from cuBLASLt's, so a prompt prefilled in chunks of 1..8 rows (this
// kernel) and in larger chunks (cuBLASLt) rounds alike.

#define GEMV_WARPS 8       // warps per block of m_gemv_bf16 and the group
#define GEMV_WIDE_WARPS 16 // m_gemv_bf16_wide: small grids, more loads in flight per SM
#define GEMV_U 4

// mma_bf16_16816: c += a·b for one m16n8k16 tile (a 16×16 row-major bf16,
// b 16×8 column-major bf16, c 16×8 float32), PTX fragment layouts.
__device__ __forceinline__ void mma_bf16_16816(float *c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// split_bf16x2: the hi and lo bf16 parts of two floats, packed as the mma
// wants them (element a in the low half): hi = bf16(x), lo = bf16(x − hi),
// rounded to nearest even like f2bf (m_split_bf16), with the hardware
// conversion (one instruction per pair; the software f2bf made the kernel
// ALU-bound: every block converts its slice of x).
__device__ __forceinline__ void split_bf16x2(float a, float b, u32 &hi, u32 &lo) {
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(b), "f"(a));
	const float ra = a - __uint_as_float(hi << 16), rb = b - __uint_as_float(hi & 0xffff0000u);
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(rb), "f"(ra));
}

// GEMV_EMU_BEGIN (testdata/gdnemu/run.sh compiles from here on for the host)

// gemv_bf16_block computes block blk's 16 outputs of m_gemv_bf16: out[r, o] =
// Σ_k x[r, k]·w[o, k] for n ≤ 8 rows of float32 activations and bf16
// weights [O, K], K % 8 == 0, 16-byte aligned rows; block 32·W.
// A block owns 16 outputs; its W warps
// take interleaved 32-wide k steps. In a step lane (g = lane/4, q = lane%4)
// loads 8 weights of rows o0+g and o0+g+8 at k+8q (16-byte loads) and 8
// activations of row g at the same k; the mma's k order is permuted alike
// on both sides (its columns 2q,2q+1 / 2q+8,2q+9 are the lane's elements
// 0,1 / 2,3, then 4,5 / 6,7 for the second mma), which leaves the sum the
// same. The hi and lo parts are two n-tiles (columns = activation rows).
template <int W>
__device__ __forceinline__ void gemv_bf16_block(float *out, const float *x, const bf16 *w, int n, int O, int K, int blk) {
	__shared__ float red[W][32][9];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	const int o0 = blk * 16;
	const int ra = min(o0 + g, O - 1), rb = min(o0 + g + 8, O - 1);
	const bf16 *wa = w + (long long)ra * K + q * 8, *wb = w + (long long)rb * K + q * 8;
	const bool xrow = g < n;
	const float *xr = x + (long long)(xrow ? g : 0) * K + q * 8;
	const int steps = (K + 31) / 32;
	float ch[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (int s0 = warp; s0 < steps; s0 += W * GEMV_U) {
		uint4 A[GEMV_U], B[GEMV_U];
		float4 X0[GEMV_U], X1[GEMV_U];
#pragma unroll
		for (int u = 0; u < GEMV_U; u++) {
			const int k = (s0 + u * W) * 32;
			const bool in = s0 + u * W < steps && k + q * 8 < K;
			const uint4 z = {0u, 0u, 0u, 0u};
			const float4 zf = {0.0f, 0.0f, 0.0f, 0.0f};
			A[u] = in ? *(const uint4 *)(wa + k) : z;
			B[u] = in ? *(const uint4 *)(wb + k) : z;
			X0[u] = in && xrow ? *(const float4 *)(xr + k) : zf;
			X1[u] = in && xrow ? *(const float4 *)(xr + k + 4) : zf;
		}
#pragma unroll
		for (int u = 0; u < GEMV_U; u++) {
			const float xv[8] = {X0[u].x, X0[u].y, X0[u].z, X0[u].w, X1[u].x, X1[u].y, X1[u].z, X1[u].w};
			u32 h[4], l[4];
#pragma unroll
			for (int i = 0; i < 4; i++) split_bf16x2(xv[2 * i], xv[2 * i + 1], h[i], l[i]);
			mma_bf16_16816(ch, A[u].x, B[u].x, A[u].y, B[u].y, h[0], h[1]);
			mma_bf16_16816(ch, A[u].z, B[u].z, A[u].w, B[u].w, h[2], h[3]);
			mma_bf16_16816(cl, A[u].x, B[u].x, A[u].y, B[u].y, l[0], l[1]);
			mma_bf16_16816(cl, A[u].z, B[u].z, A[u].w, B[u].w, l[2], l[3]);
		}
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		red[warp][lane][i] = ch[i];
		red[warp][lane][4 + i] = cl[i];
	}
	__syncthreads();
	if (warp != 0) return;
	// c0: (output g, row 2q), c1: (g, 2q+1), c2: (g+8, 2q), c3: (g+8, 2q+1);
	// the hi and lo sums are each completed before they are added, as the
	// split GEMM's two halves are.
#pragma unroll
	for (int i = 0; i < 4; i++) {
		float hs = 0.0f, ls = 0.0f;
		for (int v = 0; v < W; v++) {
			hs += red[v][lane][i];
			ls += red[v][lane][4 + i];
		}
		const int o = o0 + g + (i >= 2 ? 8 : 0), r = 2 * q + (i & 1);
		if (o < O && r < n) out[(long long)r * O + o] = hs + ls;
	}
}

// m_gemv_bf16: the decode-step MatMul, out = x·wᵀ (gemv_bf16_block).
// grid ceil(O/16), block 32·GEMV_WARPS.
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) m_gemv_bf16(float *out, const float *x, const bf16 *w, int n, int O, int K) {
	KT_GRID_DEP();
	gemv_bf16_block<GEMV_WARPS>(out, x, w, n, O, K, blockIdx.x);
}

// m_gemv_bf16_wide: m_gemv_bf16 with GEMV_WIDE_WARPS warps splitting K,
// for weights of few 16-row blocks (a grid that leaves SMs idle or one
// block per SM): twice the loads in flight per block. The same products;
// the K partial sums add in another order. grid ceil(O/16), block
// 32·GEMV_WIDE_WARPS.
extern "C" __global__ void __launch_bounds__(32 * GEMV_WIDE_WARPS) m_gemv_bf16_wide(float *out, const float *x, const bf16 *w, int n, int O, int K) {
	KT_GRID_DEP();
	gemv_bf16_block<GEMV_WIDE_WARPS>(out, x, w, n, O, K, blockIdx.x);
}

// m_gemv_bf16_group: up to four decode-step MatMuls that read the same
// activations x [n, K] in one launch (Backend.MatMulGroup): product i is
// out_i = x·w_iᵀ with w_i [O_i, K], computed by blocks s_i ≤ b < s_(i+1)
// (s_0 = 0, s_i the sum of the earlier products' ceil(O/16); an unused
// product has O = 0 and its start at the grid's end). Each block runs
// exactly m_gemv_bf16's arithmetic for its 16 outputs, so every output is
// bit-identical to an m_gemv_bf16 launch of its own. grid Σ ceil(O_i/16), block
// 32·GEMV_WARPS.
extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) m_gemv_bf16_group(const float *x, int n, int K,
	float *out0, const bf16 *w0, int O0, float *out1, const bf16 *w1, int O1, int s1,
	float *out2, const bf16 *w2, int O2, int s2, float *out3, const bf16 *w3, int O3, int s3) {
	KT_GRID_DEP();
	const int b = blockIdx.x;
	if (b >= s3) gemv_bf16_block<GEMV_WARPS>(out3, x, w3, n, O3, K, b - s3);
	else if (b >= s2) gemv_bf16_block<GEMV_WARPS>(out2, x, w2, n, O2, K, b - s2);
	else if (b >= s1) gemv_bf16_block<GEMV_WARPS>(out1, x, w1, n, O1, K, b - s1);
	else gemv_bf16_block<GEMV_WARPS>(out0, x, w0, n, O0, K, b);
}
