// matmul.cu: MatMul of the op set (Backend.MatMul in backend_ops.go) off
// the GEMV: the general kernel for shapes cuBLASLt has no algorithm for,
// and the split of the float32 activations into hi and lo 16-bit halves
// around the cuBLASLt GEMM.

// m_matmul: out[i, o] = Σ_k x[i, k]·w[o, k], one warp per output, for
// shapes cuBLASLt has no algorithm for. grid (ceil(O/8), n), block 256.
extern "C" __global__ void m_matmul(act_t *out, const act_t *x, const void *w, int dt, int O, int K) {
	KT_GRID_DEP();
	int o = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31, i = blockIdx.y;
	if (o >= O) return;
	float s = 0.0f;
	for (int k = lane; k < K; k += 32) s += ld_act(x, (long long)i * K + k) * ldw(w, (long long)o * K + k, dt);
	s = warp_sum(s);
	if (lane == 0) st_act(out, (long long)i * O + o, s);
}

// m_split_bf16 / m_split_f16: the activations x as the sum of two 16-bit
// matrices stacked by rows, out[0..n) = hi = round(x), out[n..2n) = lo =
// round(x - hi), so one GEMM of twice the rows gives x·Wᵀ with ~16 bits
// more precision than x rounded once (weights read once).
extern "C" __global__ void m_split_bf16(bf16 *out, const float *in, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	split_bf16(in[i], out + i, out + n + i);
}
extern "C" __global__ void m_split_f16(unsigned short *out, const float *in, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	float x = in[i];
	unsigned short hi = f2h(x);
	out[i] = hi;
	out[n + i] = f2h(x - h2f(hi));
}

// m_add_halves: out[i] = d[i] + d[n + i] (the hi and lo GEMM rows).
extern "C" __global__ void m_add_halves(act_t *out, const float *d, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) st_act(out, i, d[i] + d[n + i]);
}
