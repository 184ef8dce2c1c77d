// predict.cu: the hybrid step's expert prediction.

// m_route_logits: out[t][e] = Σ_h w[e][h]·g[h]·x[t][h] for n rows of x (f32,
// H apart) and E experts (bf16 router weights [E][H]), in f32, one warp per
// (row, expert): a router applied to its RMS-normed input without the 1/rms
// factor, which no top-k depends on, in one launch instead of a norm, a
// GEMV and a copy. out may be pinned host memory (its device address): the
// host then picks the top k from it with no copy.
extern "C" __global__ void m_route_logits(float *out, const float *x, const float *g, const bf16 *w, int n, int E, int H) {
	KT_GRID_DEP();
	const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const int lane = threadIdx.x & 31;
	if (warp >= (long long)n * E) return;
	const int t = (int)(warp / E), e = (int)(warp % E);
	const float *xr = x + (long long)t * H;
	const bf16 *wr = w + (long long)e * H;
	float s = 0.0f;
	if (H % 8 == 0) { // 16-byte loads: eight weights, eight inputs and eight norm weights a lane per step
		const uint4 *w8 = (const uint4 *)wr;
		const float4 *x4 = (const float4 *)xr, *g4 = (const float4 *)g;
#pragma unroll 4
		for (int c = lane; c < H / 8; c += 32) {
			const uint4 q = w8[c];
			const float4 xa = x4[2 * c], xb = x4[2 * c + 1], ga = g4[2 * c], gb = g4[2 * c + 1];
			s += __uint_as_float(q.x << 16) * (ga.x * xa.x) + __uint_as_float(q.x & 0xffff0000u) * (ga.y * xa.y);
			s += __uint_as_float(q.y << 16) * (ga.z * xa.z) + __uint_as_float(q.y & 0xffff0000u) * (ga.w * xa.w);
			s += __uint_as_float(q.z << 16) * (gb.x * xb.x) + __uint_as_float(q.z & 0xffff0000u) * (gb.y * xb.y);
			s += __uint_as_float(q.w << 16) * (gb.z * xb.z) + __uint_as_float(q.w & 0xffff0000u) * (gb.w * xb.w);
		}
	} else {
		for (int h = lane; h < H; h += 32) s += bf2f(wr[h]) * (g[h] * xr[h]);
	}
	s = warp_sum(s);
	if (lane == 0) out[(long long)t * E + e] = s;
}
