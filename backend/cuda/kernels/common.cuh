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

// The op set's kernels (Backend in backend.go) run the model definitions'
// ops with float32 activations, as the op-set contract says, for any shape
// the models produce. The activation type is a typedef read and written
// through ld_act/st_act.
//
// Weights are passed as untyped pointers with a dtype code (WT_F32, WT_BF16,
// WT_F16) and read through ldw: bf16 weights stay bf16 on the device.
//
// Step metadata (Backend.SetStep) lives in fixed device buffers:
//   tokens[t], pos[t], rowseq[t] (row -> sequence index), outrows[j],
//   seq_start[s], seq_len[s], seq_pos[s], seq_slot[s], page_off[s] (first
//   entry of sequence s in pages[]).
// Arithmetic follows the CPU backend (backend/cpu), which is the reference:
// float32 everywhere, float64 where the CPU code widens (exp of gates, the
// rotary angles).

typedef float act_t;
__device__ __forceinline__ float ld_act(const act_t *p, long long i) { return p[i]; }
__device__ __forceinline__ void st_act(act_t *p, long long i, float v) { p[i] = v; }
// ld_act4 / st_act4: elements i..i+3 (i a multiple of 4, 16-byte aligned).
__device__ __forceinline__ void ld_act4(const act_t *p, long long i, float *f) {
	const float4 v = *(const float4 *)(p + i);
	f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
}
__device__ __forceinline__ void st_act4(act_t *p, long long i, const float *f) {
	float4 v;
	v.x = f[0], v.y = f[1], v.z = f[2], v.w = f[3];
	*(float4 *)(p + i) = v;
}

#define WT_F32 0
#define WT_BF16 1
#define WT_F16 2

__device__ __forceinline__ float h2f(unsigned short h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
	unsigned short h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

// ldw reads element i of a weight of dtype code dt as float.
__device__ __forceinline__ float ldw(const void *p, long long i, int dt) {
	if (dt == WT_BF16) return bf2f(((const bf16 *)p)[i]);
	if (dt == WT_F16) return h2f(((const unsigned short *)p)[i]);
	return ((const float *)p)[i];
}

// ldw4 reads weight elements i..i+3 (i a multiple of 4, the weight
// 16-byte aligned) as floats.
__device__ __forceinline__ void ldw4(const void *p, long long i, int dt, float *f) {
	if (dt == WT_F32) {
		const float4 v = *(const float4 *)((const float *)p + i);
		f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
		return;
	}
	const uint2 u = *(const uint2 *)((const unsigned short *)p + i);
	const unsigned short h[4] = {(unsigned short)(u.x & 0xffffu), (unsigned short)(u.x >> 16), (unsigned short)(u.y & 0xffffu),
				     (unsigned short)(u.y >> 16)};
#pragma unroll
	for (int j = 0; j < 4; j++) f[j] = dt == WT_BF16 ? bf2f(h[j]) : h2f(h[j]);
}

// Exact-ish helpers where the CPU backend computes in float64.
__device__ __forceinline__ float silu_d(float x) { return x / (1.0f + (float)exp(-(double)x)); }
__device__ __forceinline__ float sigmoid_d(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

// split_bf16 writes x as the sum of two bf16 values, hi = round(x) and
// lo = round(x - hi): ~16 bits more precision than x rounded once.
__device__ __forceinline__ void split_bf16(float x, bf16 *hi, bf16 *lo) {
	const bf16 h = f2bf(x);
	*hi = h;
	*lo = f2bf(x - bf2f(h));
}
