// RMSNorm variants. One block per row; rows may be strided (per-head norms
// inside a packed projection). Arithmetic follows Hugging Face:
//   mode 0 (Qwen3RMSNorm):     y = bf16(w * bf16(x * r))
//   mode 1 (Gemma-style 1+w, Qwen3-Next / Qwen3.5): y = bf16(x * r * (1 + w))
// with r = rsqrt(mean(x^2) + eps) computed in float32.

__device__ float row_rms(const bf16 *x, int dim, float eps, float *scratch) {
	float ss = 0.0f;
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float v = bf2f(x[i]);
		ss += v * v;
	}
	ss = block_sum(ss, scratch);
	return rsqrtf(ss / (float)dim + eps);
}

__device__ __forceinline__ float norm_apply(float v, float r, float w, int mode) {
	if (mode == 0) return rbf(w * rbf(v * r));
	return v * r * (1.0f + w);
}

extern "C" __global__ void rmsnorm_bf16(bf16 *out, const bf16 *x, const bf16 *w, int dim, float eps, int mode,
					long long x_stride, long long out_stride) {
	KT_GRID_DEP();
	__shared__ float scratch[32];
	const bf16 *xr = x + (long long)blockIdx.x * x_stride;
	bf16 *orow = out + (long long)blockIdx.x * out_stride;
	float r = row_rms(xr, dim, eps, scratch);
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		orow[i] = f2bf(norm_apply(bf2f(xr[i]), r, bf2f(w[i]), mode));
}

// add_rmsnorm_bf16: resid = bf16(resid + x) (the residual stream), then
// out = norm(resid). In place on resid; out may alias x.
extern "C" __global__ void add_rmsnorm_bf16(bf16 *out, bf16 *resid, const bf16 *x, const bf16 *w, int dim, float eps,
					    int mode) {
	KT_GRID_DEP();
	__shared__ float scratch[32];
	long long off = (long long)blockIdx.x * dim;
	bf16 *rr = resid + off;
	const bf16 *xr = x + off;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float v = rbf(bf2f(rr[i]) + bf2f(xr[i]));
		rr[i] = f2bf(v);
		ss += v * v;
	}
	ss = block_sum(ss, scratch);
	float r = rsqrtf(ss / (float)dim + eps);
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		out[off + i] = f2bf(norm_apply(bf2f(rr[i]), r, bf2f(w[i]), mode));
}

// rmsnorm_gated_bf16 (Qwen3NextRMSNormGated, per head):
//   y = bf16( bf16(w * bf16(x * r)) * silu(z) )
extern "C" __global__ void rmsnorm_gated_bf16(bf16 *out, const bf16 *x, const bf16 *z, const bf16 *w, int dim,
					      float eps, long long x_stride, long long z_stride, long long out_stride) {
	KT_GRID_DEP();
	__shared__ float scratch[32];
	const bf16 *xr = x + (long long)blockIdx.x * x_stride;
	const bf16 *zr = z + (long long)blockIdx.x * z_stride;
	bf16 *orow = out + (long long)blockIdx.x * out_stride;
	float r = row_rms(xr, dim, eps, scratch);
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float t = rbf(bf2f(w[i]) * rbf(bf2f(xr[i]) * r));
		orow[i] = f2bf(t * silu_f(bf2f(zr[i])));
	}
}
