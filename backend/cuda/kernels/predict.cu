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
	for (int h = lane; h < H; h += 32) s += bf2f(wr[h]) * (g[h] * xr[h]);
	s = warp_sum(s);
	if (lane == 0) out[(long long)t * E + e] = s;
}
