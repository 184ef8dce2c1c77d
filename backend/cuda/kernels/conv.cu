// Causal depthwise conv1d with state (Gated DeltaNet's short convolution),
// followed by SiLU, as Hugging Face's torch path computes it:
//   y[t][c] = bf16(silu(bf16(bias[c] + sum_j w[c][j] * x[t-K+1+j][c])))
// Tokens before a sequence's first new token come from its state: the last
// K-1 inputs seen, bf16 [slots, K-1, C] (zero for a fresh sequence).
// Sequences are packed: sequence s has tokens cu[s]..cu[s+1]-1 and state
// slot slots[s]. grid (ceil(C/128), chunks of 32 tokens, B), block 128.
#define CONV_CHUNK 32
#define CONV_MAXK 8
extern "C" __global__ void conv1d_silu_bf16(bf16 *out, long long out_stride, const bf16 *x, long long x_stride,
					    const bf16 *w, const bf16 *bias, const bf16 *state, const int *cu,
					    const int *slots, int C, int K) {
	KT_GRID_DEP();
	int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.z;
	if (c >= C) return;
	int t0 = cu[s], n = cu[s + 1] - t0;
	int c0 = blockIdx.y * CONV_CHUNK;
	if (c0 >= n) return;
	int c1 = min(n, c0 + CONV_CHUNK);
	float wf[CONV_MAXK], hist[CONV_MAXK];
#pragma unroll
	for (int j = 0; j < CONV_MAXK; j++) wf[j] = j < K ? bf2f(w[c * K + j]) : 0.0f;
	float bv = bias ? bf2f(bias[c]) : 0.0f;
	const bf16 *st = state + (long long)slots[s] * (K - 1) * C;
	// hist[j] = input at relative token c0-K+1+j, j < K-1.
#pragma unroll
	for (int j = 0; j < CONV_MAXK - 1; j++) {
		if (j < K - 1) {
			int t = c0 - (K - 1) + j;
			hist[j] = t >= 0 ? bf2f(x[(long long)(t0 + t) * x_stride + c]) : bf2f(st[(long long)(K - 1 + t) * C + c]);
		}
	}
	for (int t = c0; t < c1; t++) {
		float xv = bf2f(x[(long long)(t0 + t) * x_stride + c]);
		float a = bv;
#pragma unroll
		for (int j = 0; j < CONV_MAXK - 1; j++)
			if (j < K - 1) a += wf[j] * hist[j];
		a += wf[K - 1] * xv;
		out[(long long)(t0 + t) * out_stride + c] = f2bf(silu_f(rbf(a)));
#pragma unroll
		for (int j = 0; j < CONV_MAXK - 2; j++)
			if (j < K - 2) hist[j] = hist[j + 1];
		if (K >= 2) hist[K - 2] = xv;
	}
}

// conv_state_update_bf16 stores each sequence's last K-1 inputs (older
// state first when the chunk is shorter than K-1). Run after
// conv1d_silu_bf16 on the same stream. grid (ceil(C/128), B), block 128.
extern "C" __global__ void conv_state_update_bf16(bf16 *state, const bf16 *x, long long x_stride, const int *cu,
						  const int *slots, int C, int K) {
	KT_GRID_DEP();
	int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
	if (c >= C) return;
	int t0 = cu[s], n = cu[s + 1] - t0;
	bf16 *st = state + (long long)slots[s] * (K - 1) * C;
	bf16 nv[CONV_MAXK];
#pragma unroll
	for (int j = 0; j < CONV_MAXK - 1; j++) {
		if (j < K - 1) {
			int t = n - (K - 1) + j; // relative token index
			nv[j] = t >= 0 ? x[(long long)(t0 + t) * x_stride + c] : st[(long long)(K - 1 + t) * C + c];
		}
	}
#pragma unroll
	for (int j = 0; j < CONV_MAXK - 1; j++)
		if (j < K - 1) st[(long long)j * C + c] = nv[j];
}
