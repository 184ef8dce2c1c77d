// elementwise.cu: the op set's element-wise kernels (Backend.Add,
// LoRAAdd, SiLUMul, SigmoidGate), and word copies between device and
// pinned host memory (Device.KernelCopy).

// m_add: out = a + b over n elements.
extern "C" __global__ void m_add(act_t *out, const act_t *a, const act_t *b, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) st_act(out, i, ld_act(a, i) + ld_act(b, i));
}

// m_lora_add: out[r, j] += s·d[r, j] over the m = rows·w elements of the
// rows r whose request's adapter (row_ad[r], from SetStep) is adapter;
// adapter < 0 selects every row (a static adapter).
extern "C" __global__ void m_lora_add(act_t *out, const act_t *d, const int *row_ad, float s, int adapter, int w, long long m) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= m) return;
	if (adapter >= 0 && row_ad[i / w] != adapter) return;
	st_act(out, i, ld_act(out, i) + s * ld_act(d, i));
}

// m_silu_mul: out = silu(gate)·up over n elements.
extern "C" __global__ void m_silu_mul(act_t *out, const act_t *g, const act_t *u, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) st_act(out, i, silu_d(ld_act(g, i)) * ld_act(u, i));
}

// m_sigmoid_gate: out[r, j] = x[r, j]·sigmoid(gate[r, gw == 1 ? 0 : j]).
extern "C" __global__ void m_sigmoid_gate(act_t *out, const act_t *x, const act_t *gate, int w, int gw, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	long long r = i / w, j = i % w;
	st_act(out, i, ld_act(x, i) * sigmoid_d(ld_act(gate, r * gw + (gw == 1 ? 0 : j))));
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
