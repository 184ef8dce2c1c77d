// common.cuh: helpers pasted in front of every kt kernel module. NVRTC is
// given no include path, so nothing here includes a CUDA header: bfloat16
// is handled as raw 16-bit patterns, converted by hand (round to nearest
// even, NaN kept a NaN), exactly as tensor.F32ToBF16 does on the CPU.
typedef unsigned short bf16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define KT_INF __int_as_float(0x7f800000)

// KT_GRID_DEP opens every kernel (kernels.go checks it; a kernel without it
// is launched the plain way). On sm_90 and newer the launcher lets a kernel
// start before the one ahead of it in the stream has finished
// (programmatic dependent launch): griddepcontrol.wait holds every thread
// until all earlier grids have completed and their writes are visible, so
// nothing is read or written before then; launch_dependents then lets the
// next kernel be scheduled while this one runs, so its launch latency hides
// behind this kernel's work. Both are no-ops when the launch did not ask
// for it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KT_GRID_DEP() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define KT_GRID_DEP() do { } while (0)
#endif

__device__ __forceinline__ float bf2f(bf16 x) { return __uint_as_float(((u32)x) << 16); }
__device__ __forceinline__ bf16 f2bf(float f) {
	u32 u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16)(u >> 16);
}
// rbf rounds a float to bfloat16 precision (what a bf16 tensor op stores).
__device__ __forceinline__ float rbf(float f) { return bf2f(f2bf(f)); }

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum returns the sum of v over the block to every thread. scratch
// needs 32 floats; blockDim.x must be a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float *scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	v = lane < nw ? scratch[lane] : 0.0f;
	return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	v = lane < nw ? scratch[lane] : -KT_INF;
	return warp_max(v);
}

// Load 8 bf16 (16 bytes) as floats.
__device__ __forceinline__ void load8(const bf16 *p, float *f) {
	uint4 u = *(const uint4 *)p;
	u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		f[2 * i] = __uint_as_float(w[i] << 16);
		f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
	}
}
