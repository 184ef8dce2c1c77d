// Element-wise and gather kernels. All bf16 results are rounded as a bf16
// tensor op would round them.

// embed_bf16: out[t] = table[ids[t]]; ids outside [0, V) give zeros.
// grid T, block 128; H % 8 == 0.
extern "C" __global__ void embed_bf16(bf16 *out, const bf16 *table, const int *ids, int V, int H) {
	KT_GRID_DEP();
	int t = blockIdx.x, id = ids[t];
	bf16 *dst = out + (long long)t * H;
	for (int i = threadIdx.x * 8; i < H; i += blockDim.x * 8) {
		uint4 v = make_uint4(0, 0, 0, 0);
		if (id >= 0 && id < V) v = *(const uint4 *)(table + (long long)id * H + i);
		*(uint4 *)(dst + i) = v;
	}
}

// add_bf16: out = bf16(a + b), n elements.
extern "C" __global__ void add_bf16(bf16 *out, const bf16 *a, const bf16 *b, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) out[i] = f2bf(bf2f(a[i]) + bf2f(b[i]));
}

// silu_mul_bf16: rows of [gate | up] (2*I wide, row stride in_stride) ->
// out[r][i] = bf16(bf16(silu(gate)) * up). grid rows, block 256.
extern "C" __global__ void silu_mul_bf16(bf16 *out, const bf16 *in, int I, long long in_stride) {
	KT_GRID_DEP();
	const bf16 *row = in + (long long)blockIdx.x * in_stride;
	bf16 *o = out + (long long)blockIdx.x * I;
	for (int i = threadIdx.x; i < I; i += blockDim.x)
		o[i] = f2bf(rbf(silu_f(bf2f(row[i]))) * bf2f(row[I + i]));
}

// sigmoid_mul_bf16: out[r][i] = bf16(x[r][i] * bf16(sigmoid(g[r][i]))), the
// attention output gate. grid rows, block 256.
extern "C" __global__ void sigmoid_mul_bf16(bf16 *out, const bf16 *x, const bf16 *g, int n, long long x_stride,
					    long long g_stride, long long out_stride) {
	KT_GRID_DEP();
	long long r = blockIdx.x;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		out[r * out_stride + i] = f2bf(bf2f(x[r * x_stride + i]) * rbf(sigmoid_f(bf2f(g[r * g_stride + i]))));
}

// gated_add_bf16: out[r] = bf16(out[r] + bf16(bf16(sigmoid(gate[r])) * y[r]))
// with one gate logit per row (the shared expert's gate). grid rows.
extern "C" __global__ void gated_add_bf16(bf16 *out, const bf16 *y, const bf16 *gate, long long gate_stride, int n) {
	KT_GRID_DEP();
	long long r = blockIdx.x;
	float s = rbf(sigmoid_f(bf2f(gate[r * gate_stride])));
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		out[r * n + i] = f2bf(bf2f(out[r * n + i]) + rbf(s * bf2f(y[r * n + i])));
}

// bf16_to_f32 and f32_to_bf16 convert n elements.
extern "C" __global__ void bf16_to_f32(float *out, const bf16 *in, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) out[i] = bf2f(in[i]);
}
extern "C" __global__ void f32_to_bf16(bf16 *out, const float *in, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) out[i] = f2bf(in[i]);
}

// fp8_block_dequant: W[n][k] = fp8_e4m3(q[n][k]) * scale[n/128][k/128]
// (DeepSeek/Qwen FP8 checkpoints, weight_scale_inv), to bf16.
__device__ __forceinline__ float e4m3_to_f(unsigned char b) {
	int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
	float v;
	if (e == 15 && m == 7) v = __int_as_float(0x7fc00000);
	else if (e == 0) v = ldexpf((float)m / 8.0f, -6);
	else v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
	return s ? -v : v;
}
extern "C" __global__ void fp8_block_dequant(bf16 *out, const unsigned char *q, const float *scale, int N, int K,
					     int block) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (long long)N * K) return;
	int n = i / K, k = i % K;
	int kb = (K + block - 1) / block;
	out[i] = f2bf(e4m3_to_f(q[i]) * scale[(n / block) * kb + k / block]);
}

// m_copy_words: up to three copies of n_i 4-byte words from s_i to d_i in
// one launch (Device.KernelCopy). Addresses may be mapped pinned host
// memory: for the small copies of the hybrid hand-off a kernel costs far
// less on the critical path than a copy-engine transfer. The closing
// system-scope fence makes the writes to host memory visible before the
// kernel is seen complete. grid-stride, block 256.
extern "C" __global__ void m_copy_words(u32 *d0, const u32 *s0, long long n0, u32 *d1, const u32 *s1, long long n1, u32 *d2,
					const u32 *s2, long long n2) {
	KT_GRID_DEP();
	const long long n = n0 + n1 + n2, stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		if (i < n0) d0[i] = s0[i];
		else if (i < n0 + n1) d1[i - n0] = s1[i - n0];
		else d2[i - n0 - n1] = s2[i - n0 - n1];
	}
	__threadfence_system();
}
